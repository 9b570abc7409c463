"""Searches per second in a VRAG-RL rollout turn: one index call per episode vs one per turn.

A GRPO step of VRAG-RL runs B prompts x G episodes; at a turn where every active episode
searches, the rollout loop gathers their queries and asks each index once
(``evidra.rollout.prefetch_searches``) instead of once per episode. This benchmark plays such
turns through real ``SearchEnv`` episodes (the search-agent parser, exclusions of pages already
shown, the retrieved page opened and resized for the next observation) over three indexes:

* ``maxsim``: the exact multi-vector store (``MultiVectorIndex``, compute dtype chosen by the
  hardware) over N synthetic pages of ``--patches`` vectors; query texts are turned into vectors
  by a seeded stand-in for a ColQwen2 query encoder (the encoder's own cost is left out);
* ``bm25``: evidra's BM25 over N pages of synthetic text;
* ``service``: the same exact store behind ``SearchService`` (``evidra serve-index``) on
  loopback, reached with ``SearchClient``.

Every mode must return the same pages as one-by-one searches (checked; ``same=yes``).

    OMP_NUM_THREADS=2 python benchmarks/search_turns.py --pages 10000 --episodes 64

Its defaults (4k pages) finish in a few minutes on 2 cores; 10k pages take about 2.5x as long.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from PIL import Image

from evidra.core.types import Sample
from evidra.env.search import SearchEnv
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.interfaces import EncodedRetriever
from evidra.retrieval.kernels import compute_dtype as compute
from evidra.rollout import prefetch_searches

DIM, QUERY_TOKENS = 128, 20
WORDS = [f"w{i}" for i in range(5000)]


class SeededQueries:
    """A stand-in query encoder: each text maps to fixed unit vectors (a hash seeds them)."""

    kind = "multi"
    name = "seeded"
    dim = DIM

    def embed_queries(self, queries: Sequence[str]) -> list[torch.Tensor]:
        out = []
        for text in queries:
            seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
            g = torch.Generator().manual_seed(seed)
            out.append(torch.nn.functional.normalize(torch.randn(QUERY_TOKENS, DIM, generator=g), dim=-1))
        return out

    def embed_pages(self, pages: Sequence[Any]) -> list[torch.Tensor]:
        raise NotImplementedError("pages are embedded by the benchmark itself")


def zipf_text(rng: random.Random, n: int) -> str:
    return " ".join(WORDS[min(int(rng.paretovariate(1.1)) - 1, len(WORDS) - 1)] for _ in range(n))


def build_indexes(n: int, patches: int, root: Path, image: str) -> dict[str, Any]:
    ids = [f"p{i}" for i in range(n)]
    index = MultiVectorIndex.create(root / "maxsim", DIM, options=MaxSimOptions(device="cpu", verify=False))
    g = torch.Generator().manual_seed(0)
    for s in range(0, n, 2000):
        chunk = ids[s : s + 2000]
        vecs = [
            torch.nn.functional.normalize(torch.randn(patches, DIM, generator=g), dim=-1).half()
            for _ in chunk
        ]
        index.add(chunk, vecs, [image] * len(chunk))
    rng = random.Random(0)
    bm25 = BM25Retriever.build({pid: zipf_text(rng, 300) for pid in ids}, images=dict.fromkeys(ids, image))
    return {"maxsim": EncodedRetriever(SeededQueries(), index), "bm25": bm25}  # type: ignore[arg-type]


def turn_texts(episodes: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [f"<think>look it up</think><search>{zipf_text(rng, 6)}</search>" for _ in range(episodes)]


def play(searcher: Any, texts: list[str], batched: bool, turns: int) -> tuple[float, list[list[str]]]:
    """Seconds for ``turns`` search turns of ``len(texts)`` episodes, and each episode's pages."""
    envs = [SearchEnv(searcher, {}, max_turns=turns + 2) for _ in texts]
    sample = Sample("q", "question?", ("a",))
    for env in envs:
        env.reset(sample)
    start = time.perf_counter()
    for turn in range(turns):
        this_turn = [t.replace("</search>", f" {turn}</search>") for t in texts]
        if batched:
            prefetch_searches([SimpleNamespace(env=e) for e in envs], this_turn)
        for env, text in zip(envs, this_turn, strict=True):
            env.step(text)
    return time.perf_counter() - start, [list(e.retrieved) for e in envs]


def measure(name: str, searcher: Any, args: argparse.Namespace) -> str:
    texts = turn_texts(args.episodes, seed=1)
    play(searcher, texts[:4], True, 1)  # warm-up (thread pools, first blocks)
    alone, pages_alone = min(
        (play(searcher, texts, False, args.turns) for _ in range(args.repeats)), key=lambda r: r[0]
    )
    batch, pages_batch = min(
        (play(searcher, texts, True, args.turns) for _ in range(args.repeats)), key=lambda r: r[0]
    )
    searches = args.episodes * args.turns
    same = "yes" if pages_alone == pages_batch else "NO"
    return (
        f"{name:8} one-by-one {searches / alone:9.1f} searches/s   batched {searches / batch:9.1f} "
        f"searches/s   ratio {alone / batch:5.2f}x   same={same}"
    )


def with_service(searcher: Any, fn: Callable[[Any], str]) -> str:
    from evidra.retrieval.service.client import SearchClient
    from evidra.retrieval.service.server import SearchService

    with SearchService(searcher).running() as url:
        client = SearchClient(url)
        try:
            return fn(client)
        finally:
            client.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--pages", type=int, default=4000, help="the figures in the docs: 10000")
    parser.add_argument("--patches", type=int, default=256, help="vectors per page (ColQwen2: ~700)")
    parser.add_argument("--episodes", type=int, default=64, help="B prompts x G episodes searching in a turn")
    parser.add_argument("--turns", type=int, default=2, help="search turns per episode")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--no-service", action="store_true", help="skip the serve-index row")
    args = parser.parse_args()
    print(
        f"cpu: {compute.cpu_features().summary()}; torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads"
    )
    print(
        f"{args.pages} pages x {args.patches} vectors, {args.episodes} episodes x {args.turns} search turns"
    )
    with tempfile.TemporaryDirectory() as tmp:
        image = str(Path(tmp) / "page.png")
        Image.new("RGB", (850, 1100), "white").save(image)
        indexes = build_indexes(args.pages, args.patches, Path(tmp), image)
        lines = [measure(name, searcher, args) for name, searcher in indexes.items()]
        if not args.no_service:
            lines.append(with_service(indexes["maxsim"], lambda client: measure("service", client, args)))
    print("\n".join(lines))
    ratios = [float(line.split("ratio")[1].split("x")[0]) for line in lines]
    print(
        f"RESULT batched_vs_one_by_one_maxsim={ratios[0]:.2f} bm25={ratios[1]:.2f}"
        + (f" service={ratios[2]:.2f}" if len(ratios) > 2 else "")
    )


if __name__ == "__main__":
    main()
