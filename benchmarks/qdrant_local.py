"""Qdrant without a server, head to head: Qdrant Edge vs qdrant-client's local mode.

Both engines get the same synthetic pages (``maxsim_common.make_pages``: unit-norm fp16, N x L x D) laid
out as evidra lays them out (``multi`` full vectors, ``pooled`` vectors pooled 4 to one), and the
same 20-token planted queries (``maxsim_common.make_queries``). Every measurement alternates the engines
(a chunk of pages into one, the same chunk into the other; one query on one, the same query on the
other), so a machine shared with other work slows both alike and the ratios hold. Rows:

* ``exact``          ``candidates=0``: MaxSim over every page's full vectors
* ``prefetch +C``    the pooled prefetch of C candidates, re-ranked by exact MaxSim on ``multi``

Columns: build (pages ingested per second, Qdrant Edge flushed to disk at the end), one query
alone, a batch of ``--batch`` queries per query, top-10 agreement with exact fp32 MaxSim of the
same fp16 vectors, planted recall@5. The last line is ``RESULT build=<x> single=<y> batched=<z>
agreement_edge=<a> agreement_client=<b>``: Qdrant Edge's speed-up over local mode (exact rows).
Run::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/qdrant_local.py     # 10k pages: 5-8 min on 2 cores
    .venv/bin/python benchmarks/qdrant_local.py --pages 2000            # a quick look

Nearly all of the time is qdrant-client's: at 10k pages it ingests ~50-100 pages/s and answers a
query in 5-15 s, so the defaults time few queries (``--queries``, ``--batch``, ``--repeats``).
"""

from __future__ import annotations

import argparse
import functools
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from maxsim_common import agreement, make_pages, make_queries, recall, topk_ids  # the sibling file

from evidra.retrieval.index.qdrant import QdrantIndex
from evidra.retrieval.index.qdrant_edge import EdgeQdrantIndex
from evidra.retrieval.kernels.maxsim import build_blocks, score_blocks

K = 10
ENGINES = ("edge", "client")


def _seconds(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def build(pages: list[torch.Tensor], folder: Path, chunk: int) -> tuple[dict[str, Any], dict[str, float]]:
    """Both engines filled with ``pages``, a chunk at a time each in turn; seconds per engine."""
    dim = pages[0].shape[1]
    made = {
        "edge": EdgeQdrantIndex.create(folder / "shard", dim, candidates=0),
        "client": QdrantIndex.connect(dim, location=":memory:", candidates=0),
    }
    ids = [f"p{i}" for i in range(len(pages))]
    spent = dict.fromkeys(ENGINES, 0.0)
    for s in range(0, len(pages), chunk):
        for name in ENGINES:
            add = functools.partial(made[name].add, ids[s : s + chunk], pages[s : s + chunk])
            spent[name] += _seconds(add)[0]
    spent["edge"] += _seconds(made["edge"].shard.flush)[0]
    return made, spent


def with_candidates(index: Any, candidates: int) -> Any:
    """The same stored points searched with another prefetch size."""
    if isinstance(index, EdgeQdrantIndex):
        return EdgeQdrantIndex(index.shard, index.folder, index.dim, candidates=candidates)
    return QdrantIndex(index.client, index.collection, index.dim, candidates=candidates)


def timings(indexes: dict[str, Any], queries: list[torch.Tensor], args: argparse.Namespace) -> dict[str, Any]:
    """Per engine: median seconds of one query, of a batch per query, and the batch's top-10 ids."""
    single: dict[str, list[float]] = {n: [] for n in indexes}
    batched: dict[str, list[float]] = {n: [] for n in indexes}
    ids: dict[str, list[list[int]]] = {}
    for q in queries[: args.queries]:
        for name, index in indexes.items():
            single[name].append(_seconds(functools.partial(index.search, [q], k=K))[0])
    batch = queries[: args.batch]
    for _ in range(args.repeats):
        for name, index in indexes.items():
            t, hits = _seconds(functools.partial(index.search, batch, k=K))
            batched[name].append(t / len(batch))
            ids[name] = [[int(h.page_id[1:]) for h in row] for row in hits]
    return {n: (statistics.median(single[n]), statistics.median(batched[n]), ids[n]) for n in indexes}


def _row(
    n: int, name: str, build_rate: str, t: tuple[float, float, list[list[int]]], ref: Any, gold: Any
) -> str:
    single, batched, ids = t
    agree, rec = agreement(ids, ref[: len(ids)]), recall(ids, gold[: len(ids)], 5)
    return (
        f"{n:>6} | {name:<38} | {build_rate:>9} | {single * 1e3:10.1f} | {batched * 1e3:10.1f} | "
        f"{agree:6.3f} | {rec:5.3f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=10000)
    ap.add_argument("--length", type=int, default=256, help="patch vectors per page")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--pages-kind", choices=["iid", "smooth", "document"], default="iid")
    ap.add_argument("--queries", type=int, default=4, help="queries timed one at a time")
    ap.add_argument(
        "--batch", type=int, default=8, help="queries in the timed batch (agreement is over these)"
    )
    ap.add_argument("--repeats", type=int, default=1, help="timed batches per engine")
    ap.add_argument("--candidates", type=int, nargs="*", default=[200], help="prefetch rows")
    ap.add_argument("--chunk", type=int, default=500, help="pages per add call while building")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    n = args.pages
    pages = make_pages(n, args.length, args.dim, args.pages_kind, seed=n)
    queries, gold = make_queries(pages, seed=n, count=max(args.queries, args.batch))
    blocks = build_blocks(pages, list(range(n)), dtype=torch.float32)
    ref = topk_ids(score_blocks(queries[: args.batch], blocks, n), K)  # exact fp32 top 10
    del blocks
    print(
        f"pages {args.pages_kind} {n} x {args.length} x {args.dim} fp16; 20-token queries, batches of "
        f"{args.batch}; {args.threads} threads"
    )
    print(f"{'pages':>6} | {'engine':<38} | build p/s | 1 query ms | batch ms/q | agr@10 | R@5", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        made, spent = build(pages, Path(tmp), args.chunk)
        disk = sum(f.stat().st_blocks * 512 for f in (Path(tmp) / "shard").rglob("*") if f.is_file())
        exact = timings(made, queries, args)
        label = {"edge": "Qdrant Edge", "client": "qdrant-client local mode"}
        for name in ENGINES:
            print(
                _row(n, f"{label[name]} exact", f"{n / spent[name]:.0f}", exact[name], ref, gold), flush=True
            )
        for c in args.candidates:
            pre = timings({name: with_candidates(made[name], c) for name in ENGINES}, queries, args)
            for name in ENGINES:
                print(_row(n, f"{label[name]} prefetch +{c}", "", pre[name], ref, gold), flush=True)
        for index in made.values():
            index.close()
        shutil.rmtree(Path(tmp) / "shard", ignore_errors=True)
    ratio = [
        spent["client"] / spent["edge"],
        exact["client"][0] / exact["edge"][0],
        exact["client"][1] / exact["edge"][1],
    ]
    print(
        f"{n:>6} | Qdrant Edge shard on disk: {disk / n / 1024:.1f} KB per page; Qdrant Edge is "
        f"{ratio[0]:.1f}x as fast to build, {ratio[1]:.1f}x one query, "
        f"{ratio[2]:.1f}x batched (exact)"
    )
    agree = {name: agreement(exact[name][2], ref) for name in ENGINES}
    print(
        f"RESULT build={ratio[0]:.2f} single={ratio[1]:.2f} batched={ratio[2]:.2f} "
        f"agreement_edge={agree['edge']:.3f} agreement_client={agree['client']:.3f}"
    )


if __name__ == "__main__":
    main()
