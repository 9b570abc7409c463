"""Exact MaxSim with pages held in 16 bits vs 32 bits, scoring in the same compute dtype.

Where a CPU computes fastest in fp32 (AVX-512 without bf16/fp16, or AVX2 only), the store can hold
its pages in fp32 (no conversion while scoring, twice the memory) or in fp16 (the shards' own dtype,
widened to fp32 one scoring block at a time into one reused buffer). This times both on the same
pages and queries, interleaved so that a busy spell on a shared machine slows both, and prints
memory, one query alone and a batch of 32 per query. Run::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/storage_dtype.py              # 10k pages
    .venv/bin/python benchmarks/storage_dtype.py --pages 1000 --compute float32

The last line is ``RESULT memory_ratio=<m> single_ratio=<s> batched_ratio=<b>``: 16-bit over
32-bit storage (memory 0.5 expected; a time ratio above 1 is the widening's cost).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex


def _pages(n: int, length: int, dim: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.nn.functional.normalize(torch.randn(length, dim, generator=g), dim=-1) for _ in range(n)]


def _time(index: MultiVectorIndex, queries: list[torch.Tensor]) -> float:
    t0 = time.perf_counter()
    index.search(queries, k=10)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=10000)
    ap.add_argument("--length", type=int, default=256, help="patch vectors per page")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--compute", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    pages = _pages(args.pages, args.length, args.dim)
    g = torch.Generator().manual_seed(1)
    queries = [
        torch.nn.functional.normalize(torch.randn(20, args.dim, generator=g), dim=-1) for _ in range(32)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "idx"
        writer = MultiVectorIndex.create(root, args.dim, options=MaxSimOptions(device="cpu"))
        for start in range(0, len(pages), 1000):
            chunk = pages[start : start + 1000]
            writer.add([f"p{start + i}" for i in range(len(chunk))], chunk)
        writer.close()
        del pages
        stores = {
            held: MultiVectorIndex.open(
                root,
                options=MaxSimOptions(device="cpu", compute_dtype=args.compute, storage_dtype=held),  # type: ignore[arg-type]
            )
            for held in ("float16", "float32")
        }
        single: dict[str, list[float]] = {h: [] for h in stores}
        batched: dict[str, list[float]] = {h: [] for h in stores}
        for index in stores.values():  # warm-up: buffers, thread pool
            _time(index, queries[:1])
        for r in range(args.repeats):
            for held, index in stores.items():
                single[held].append(_time(index, [queries[r % len(queries)]]))
                batched[held].append(_time(index, queries) / len(queries))
        agree = [
            [h.page_id for h in a] == [h.page_id for h in b]
            for a, b in zip(
                stores["float16"].search(queries, 10), stores["float32"].search(queries, 10), strict=True
            )
        ]
    shape = f"{args.pages} pages x {args.length} x {args.dim}"
    print(f"{shape}, MaxSim in {args.compute}, {torch.get_num_threads()} threads")
    print(f"{'held in':<10}{'memory MB':>12}{'1 query ms':>14}{'batched ms/q':>16}")
    mem = {h: i.memory_bytes() / 1e6 for h, i in stores.items()}
    for held in stores:
        print(
            f"{held:<10}{mem[held]:>12.0f}{statistics.median(single[held]) * 1e3:>14.1f}"
            f"{statistics.median(batched[held]) * 1e3:>16.1f}"
        )
    print(f"top-10 identical for {sum(agree)}/{len(agree)} queries")
    ratio = {
        k: statistics.median(v["float16"]) / statistics.median(v["float32"])
        for k, v in (("s", single), ("b", batched))
    }
    print(
        f"RESULT memory_ratio={mem['float16'] / mem['float32']:.2f} "
        f"single_ratio={ratio['s']:.2f} batched_ratio={ratio['b']:.2f}"
    )


if __name__ == "__main__":
    main()
