"""fast-plaid (the PLAID engine behind PyLate) as a peer of ``benchmarks/maxsim.py``.

fast-plaid pins its own torch build, so it runs in its own environment and this script is its
side of the comparison: it reads the pages and queries ``maxsim.py`` wrote (a ``.pt`` file of
float32 tensors and the exact top-k of every query), builds a fast-plaid index at the library's
defaults, and prints one JSON line: build seconds, index bytes per page, single-query and
batched latency, recall@k against the exact top-k and the ids it found. Set it up once::

    python -m venv .venv-fastplaid && .venv-fastplaid/bin/pip install fast-plaid
    .venv/bin/python benchmarks/maxsim.py --fast-plaid-python .venv-fastplaid/bin/python

It imports nothing from evidra, so its environment needs only fast-plaid.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _folder_bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def main(path: str) -> None:
    import torch
    from fast_plaid import search

    data = torch.load(path, weights_only=True)
    pages, queries, exact, k = data["pages"], data["queries"], data["exact"], int(data["k"])
    torch.set_num_threads(int(data.get("threads", 1)))
    with tempfile.TemporaryDirectory() as tmp:
        index = search.FastPlaid(index=str(Path(tmp) / "plaid"), device="cpu")
        start = time.perf_counter()
        index.create(documents_embeddings=[p.float() for p in pages])
        build_s = time.perf_counter() - start
        size = _folder_bytes(Path(tmp))
        batch = torch.stack([q.float() for q in queries])  # (Q, Lq, D)
        index.search(queries_embeddings=batch[:1], top_k=k)  # warm-up
        single = []
        for q in batch:
            t0 = time.perf_counter()
            index.search(queries_embeddings=q[None], top_k=k)
            single.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        found = index.search(queries_embeddings=batch, top_k=k)
        batched = (time.perf_counter() - t0) / len(batch)
    ids = [[int(doc) for doc, _ in row] for row in found]
    recall = statistics.mean(len(set(h) & set(e.tolist())) / k for h, e in zip(ids, exact, strict=True))
    print(
        json.dumps(
            {
                "build_s": build_s,
                "bytes_per_page": size / len(pages),
                "single_ms": 1e3 * statistics.median(single),
                "batched_ms": 1e3 * batched,
                "recall": recall,
                "ids": ids,
                "torch": torch.__version__,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
