"""BM25 benchmark: evidra's BM25Retriever (bm25s engine) vs the hand-written index it replaced.

Every engine indexes the same synthetic pages with the same tokenizer (evidra's ``tokenize``:
NFKC, lower case, ``\\w+``) and the same variant (Okapi BM25, k1 1.5, b 0.75, Lucene idf):

* ``hand-written``   evidra's previous BM25 (kept here as the baseline): Counter postings per
                     term, a Python sort of every page per query, one JSON file on disk
* ``evidra (bm25s)`` ``evidra.retrieval.encoders.bm25.BM25Retriever`` as shipped
* ``bm25s retrieve`` bm25s alone on the same token ids (its own top-k, no exclusions or tie
                     order): how much evidra's wrapper costs

Pages (``--text``): ``zipf``, words drawn from a Zipf law (exponent ``--zipf``) over a
``--vocab``-word pseudo-word vocabulary, 200-450 words per page; or ``synth``, the text of the
project's synthetic document pages (``evidra.data.synth``: projects, tables, charts; a small,
repetitive vocabulary). Queries are 2-5 distinct words of a random page. Columns: build time
(tokenising included), one-query latency p50/p99 over ``--single`` queries, queries per second
of one ``search`` call over ``--batch`` queries, the saved index's size, the time to load it
back (what ``evidra index search`` and ``serve-index`` pay on start), and top-10 agreement
with the hand-written index (mean overlap of the top-10 page ids; ``same`` is the share of
queries whose top 10 are identical in order). The last line is
``RESULT single_p50_speedup=<x> batched_speedup=<y> build_ratio=<z> size_ratio=<w> agreement=<a>``
(evidra over hand-written; speed-ups above 1 favour bm25s). Run::

    OMP_NUM_THREADS=1 python benchmarks/bm25.py --pages 10000
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evidra.retrieval.encoders._bm25_terms import IDF_METHOD, METHOD, bm25s_module
from evidra.retrieval.encoders._bm25_text import tokenize
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from evidra.retrieval.kernels.compute_dtype import cpu_features

K1, B, K = 1.5, 0.75, 10
SYLLABLES = (
    "ka",
    "to",
    "ri",
    "men",
    "sa",
    "lo",
    "ven",
    "dra",
    "po",
    "li",
    "qua",
    "ter",
    "mo",
    "ne",
    "bu",
    "sil",
)


class HandWritten:
    """evidra's previous BM25: postings of (rows, tfs, idf) per term, every page sorted per query."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._index(list(texts), [Counter(tokenize(t)) for t in texts.values()])

    def _index(self, ids: list[str], docs: list[Counter[str]]) -> None:
        self.ids, self.docs = ids, docs
        lengths = np.array([sum(d.values()) for d in self.docs], dtype=np.float64)
        n, avgdl = len(self.docs), float(lengths.mean())
        self.norm = K1 * (1 - B + B * lengths / avgdl)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for row, doc in enumerate(self.docs):
            for term, tf in doc.items():
                rows, tfs = postings.setdefault(term, ([], []))
                rows.append(row)
                tfs.append(tf)
        self.postings = {
            t: (np.array(r), np.array(f, dtype=np.float64), math.log(1 + (n - len(r) + 0.5) / (len(r) + 0.5)))
            for t, (r, f) in postings.items()
        }

    def search(self, queries: Sequence[str], k: int) -> list[list[str]]:
        out = []
        for query in queries:
            scores = np.zeros(len(self.ids))
            for term in set(tokenize(query)):
                if term in self.postings:
                    rows, tfs, idf = self.postings[term]
                    scores[rows] += idf * tfs * (K1 + 1) / (tfs + self.norm[rows])
            order = sorted(range(len(scores)), key=lambda r: (-scores[r], r))
            out.append([self.ids[r] for r in order if scores[r] > 0][:k])
        return out

    def save(self, root: Path) -> None:
        data = {"k1": K1, "b": B, "ids": self.ids, "images": [""] * len(self.ids), "docs": self.docs}
        (root / "bm25.json").write_text(json.dumps(data))

    def load(self, root: Path) -> None:
        data = json.loads((root / "bm25.json").read_text())
        self._index(data["ids"], [Counter(d) for d in data["docs"]])


class Bm25sAlone:
    """bm25s by itself on evidra's tokens: its ``retrieve`` and its own top-k."""

    def __init__(self, texts: dict[str, str]) -> None:
        self.ids = list(texts)
        self.vocab: dict[str, int] = {}
        corpus = [[self.vocab.setdefault(t, len(self.vocab)) for t in tokenize(x)] for x in texts.values()]
        self.engine = bm25s_module().BM25(k1=K1, b=B, method=METHOD, idf_method=IDF_METHOD)
        self.engine.index((corpus, dict(self.vocab)), create_empty_token=False, show_progress=False)

    def search(self, queries: Sequence[str], k: int) -> list[list[str]]:
        out = []
        for query in queries:  # one retrieve per query: a query whose words are all unknown is refused
            ids = list(dict.fromkeys(self.vocab[t] for t in tokenize(query) if t in self.vocab))
            docs, scores = self.engine.retrieve([ids], k=k, show_progress=False)
            out.append(
                [self.ids[d] for d, s in zip(docs[0].tolist(), scores[0].tolist(), strict=True) if s > 0]
            )
        return out

    def save(self, root: Path) -> None:
        self.engine.save(root, allow_pickle=False, show_progress=False)

    def load(self, root: Path) -> None:
        self.engine = bm25s_module().BM25.load(root, allow_pickle=False)


class Evidra:
    def __init__(self, texts: dict[str, str]) -> None:
        self.index = BM25Retriever.build(texts, BM25Params(language="none"))  # the same plain tokens

    def search(self, queries: Sequence[str], k: int) -> list[list[str]]:
        return [[h.page_id for h in hits] for hits in self.index.search(queries, k=k)]

    def save(self, root: Path) -> None:
        self.index.save(root)

    def load(self, root: Path) -> None:
        self.index = BM25Retriever.load(root)


ENGINES: dict[str, Callable[[dict[str, str]], Any]] = {
    "hand-written": HandWritten,
    "evidra (bm25s)": Evidra,
    "bm25s retrieve": Bm25sAlone,
}


def zipf_pages(n: int, vocab: int, exponent: float, seed: int) -> dict[str, str]:
    """Pages of 200-450 words drawn from a Zipf law over pseudo-words ("kato", "rimensa", ...)."""
    rng = np.random.default_rng(seed)
    words = []
    for i in range(1, vocab + 1):
        parts = []
        while i:
            i, r = divmod(i, len(SYLLABLES))
            parts.append(SYLLABLES[r])
        words.append("".join(parts))
    p = 1.0 / np.arange(1, vocab + 1) ** exponent
    draws = rng.choice(vocab, size=(n, 450), p=p / p.sum())
    lengths = rng.integers(200, 451, size=n)
    return {f"p{i:06d}": " ".join(words[j] for j in draws[i, : lengths[i]]) for i in range(n)}


def synth_pages(n: int, seed: int) -> dict[str, str]:
    """The text of the synthetic document pages (``evidra.data.synth``), laid out in a fixed-width font."""
    from evidra.data.synth._documents_layout import KINDS, Pools, Run, layout_page

    class Monospace:
        def width(self, text: str, size: float) -> float:
            return 0.5 * size * len(text)

    rng = random.Random(seed)
    pools = Pools.new(rng)
    out = {}
    for i in range(n):
        ops = layout_page(rng, pools, Monospace(), KINDS[i % len(KINDS)]).ops
        out[f"p{i:06d}"] = " ".join(op.text for op in ops if isinstance(op, Run))
    return out


def make_queries(texts: dict[str, str], n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    pages = list(texts.values())
    out = []
    for _ in range(n):
        words = sorted(set(tokenize(rng.choice(pages))))
        out.append(" ".join(rng.sample(words, min(len(words), rng.randint(2, 5)))))
    return out


@dataclass(frozen=True)
class Row:
    name: str
    build_s: float
    p50_ms: float
    p99_ms: float
    batched_qps: float
    size_mb: float
    load_s: float
    results: list[list[str]]


def measure(name: str, texts: dict[str, str], single: list[str], batch: list[str]) -> Row:
    start = time.perf_counter()
    engine = ENGINES[name](texts)
    build = time.perf_counter() - start
    engine.search(single[:3], K)  # warm caches
    latencies = []
    for query in single:
        start = time.perf_counter()
        engine.search([query], K)
        latencies.append(time.perf_counter() - start)
    start = time.perf_counter()
    results = engine.search(batch, K)
    batched = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        engine.save(Path(tmp))
        size = sum(f.stat().st_size for f in Path(tmp).rglob("*") if f.is_file())
        start = time.perf_counter()
        engine.load(Path(tmp))
        load = time.perf_counter() - start
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    p50 = statistics.median(latencies) * 1e3
    return Row(name, build, p50, p99 * 1e3, len(batch) / batched, size / 1e6, load, results)


def agreement(results: list[list[str]], reference: list[list[str]]) -> tuple[float, float]:
    """Mean top-10 overlap with the reference, and the share of identical top-10 lists."""
    overlap = [len(set(r) & set(g)) / max(1, len(g)) for r, g in zip(results, reference, strict=True)]
    return statistics.mean(overlap), statistics.mean(r == g for r, g in zip(results, reference, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=10000)
    ap.add_argument("--text", choices=["zipf", "synth"], default="zipf")
    ap.add_argument("--vocab", type=int, default=50000, help="zipf: words in the vocabulary")
    ap.add_argument("--zipf", type=float, default=1.07, help="zipf: exponent of the word frequencies")
    ap.add_argument("--single", type=int, default=200, help="queries timed one at a time")
    ap.add_argument("--batch", type=int, default=1000, help="queries in the batched search call")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    bm25s = bm25s_module()
    load = "n/a" if not hasattr(os, "getloadavg") else f"{os.getloadavg()[0]:.2f}"
    print(f"cpu: {cpu_features().summary()}")
    print(
        f"cores {os.cpu_count()}; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; "
        f"load average {load}; numpy {np.__version__}, bm25s {bm25s.__version__}"
    )
    if args.text == "zipf":
        texts = zipf_pages(args.pages, args.vocab, args.zipf, args.seed)
    else:
        texts = synth_pages(args.pages, args.seed)
    tokens = sum(len(tokenize(t)) for t in texts.values())
    single = make_queries(texts, args.single, args.seed + 1)
    batch = make_queries(texts, args.batch, args.seed + 2)
    print(
        f"{args.pages} pages ({args.text}), {tokens / args.pages:.0f} tokens per page; "
        f"{args.single} single queries, a batch of {args.batch}; k={K}"
    )
    print(f"{'engine':<16} | build ms | 1q p50 ms | 1q p99 ms | batch q/s | disk MB | load s | agr@10 | same")
    rows = [measure(name, texts, single, batch) for name in ENGINES]
    base = rows[0]
    for row in rows:
        agr, same = agreement(row.results, base.results)
        print(
            f"{row.name:<16} | {row.build_s * 1e3:8.1f} | {row.p50_ms:9.3f} | {row.p99_ms:9.3f} | "
            f"{row.batched_qps:9.0f} | {row.size_mb:7.1f} | {row.load_s:6.2f} | "
            f"{agr:6.3f} | {same:5.3f}"
        )
    new = rows[1]
    print(
        f"RESULT single_p50_speedup={base.p50_ms / new.p50_ms:.1f}x "
        f"batched_speedup={new.batched_qps / base.batched_qps:.1f}x "
        f"build_ratio={new.build_s / base.build_s:.2f} size_ratio={new.size_mb / base.size_mb:.2f} "
        f"agreement={agreement(new.results, base.results)[0]:.3f}"
    )


if __name__ == "__main__":
    main()
