"""MaxSim search benchmark: our exact fp16 store vs transformers' score_retrieval vs Qdrant local.

Synthetic unit-norm page embeddings (N pages x L patches x D dims) and 32 queries x 20 tokens.
Half of each query's tokens are noisy copies (cosine ~0.6) of patches of one "gold" page, so
planted recall is measurable; ``--pages-kind smooth`` makes runs of 4 neighbouring patches
similar (as on real pages, where neighbouring patches of white space or text look alike), which
is what pooling relies on. Everything runs in one process on the same queries:

* ``ours fp16``        exact MaxSim, MultiVectorIndex (default settings), single and batched
* ``fp32 exact``       the same blocks in float32: the reference for top-10 agreement
* ``ours pooled``      two-stage: mean-pooled x4 prefilter, exact re-rank of the candidates
* ``score_retrieval``  transformers' ColQwen2Processor.score_retrieval (einsum, fp16)
* ``qdrant local``     qdrant-client's embedded mode, exact MAX_SIM (<= 1k pages only)

It also measures the machine's read bandwidth (large tensor copy / sum) and fp16 GEMM rate and
prints the lower bounds they imply. Run::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/maxsim.py              # 1k and 10k pages
    .venv/bin/python benchmarks/maxsim.py --sizes 1000 10000 50000      # 50k: ~3.3 GB fp16
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.maxsim import build_blocks, score_blocks

Q, LQ, K = 32, 20, 10


def timed(fn: Callable[[], Any], repeats: int, *, best: bool = False) -> tuple[float, Any]:
    """Median (or best) seconds over ``repeats`` calls after one warm-up, and the last result."""
    out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return (min(times) if best else statistics.median(times)), out


def time_each(fn: Callable[[torch.Tensor], Any], queries: list[torch.Tensor]) -> float:
    """Median seconds of ``fn(query)`` over single queries."""
    return statistics.median(timed(functools.partial(fn, q), 1)[0] for q in queries)


def fp32_reference(pages: list[torch.Tensor], queries: list[torch.Tensor]) -> tuple[float, torch.Tensor]:
    blocks = build_blocks(pages, list(range(len(pages))), dtype=torch.float32)
    return timed(lambda: score_blocks(queries, blocks, len(pages)), 1)


def make_pages(n: int, length: int, dim: int, kind: str, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    pages = []
    for _ in range(n):
        if kind == "smooth":  # runs of 4 patches around a shared base vector (cosine ~0.9)
            base = torch.randn(-(-length // 4), dim, generator=g).repeat_interleave(4, dim=0)[:length]
            page = base + 0.35 * torch.randn(length, dim, generator=g)
        else:
            page = torch.randn(length, dim, generator=g)
        pages.append(torch.nn.functional.normalize(page, dim=-1).half())
    return pages


def make_queries(pages: list[torch.Tensor], seed: int) -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(seed + 1)
    gold = torch.randint(len(pages), (Q,), generator=g).tolist()
    queries = []
    dim = pages[0].shape[1]
    for page in gold:
        tokens = torch.randn(LQ, dim, generator=g)
        picks = torch.randint(pages[page].shape[0], (LQ // 2,), generator=g)
        noise = torch.nn.functional.normalize(torch.randn(LQ // 2, dim, generator=g), dim=-1)
        tokens[: LQ // 2] = pages[page][picks].float() + 1.33 * noise  # cosine ~0.6 to a gold patch
        queries.append(torch.nn.functional.normalize(tokens, dim=-1))
    return queries, gold


def bandwidth_gbs() -> tuple[float, float]:
    """Read bandwidth (bytes read / s) from a 1 GiB copy and from a sum over 1 GiB of fp32."""
    src = torch.ones(1 << 28, dtype=torch.float32)
    dst = torch.empty_like(src)
    t_copy, _ = timed(lambda: dst.copy_(src), 5, best=True)
    t_sum, _ = timed(lambda: src.sum(), 5, best=True)
    size = src.numel() * 4
    return size / t_copy / 1e9, size / t_sum / 1e9


def gemm_gflops() -> float:
    """fp16 GEMM rate on the shape one scoring block uses: (Q*Lq, D) x (D, 16384)."""
    a, b = torch.randn(Q * LQ, 128).half(), torch.randn(16384, 128).half()
    out = torch.empty(Q * LQ, 16384, dtype=torch.float16)
    t, _ = timed(lambda: torch.matmul(a, b.T, out=out), 10, best=True)
    return 2 * Q * LQ * 16384 * 128 / t / 1e9


def topk_ids(scores: torch.Tensor, k: int) -> list[list[int]]:
    return scores.float().topk(k, dim=1).indices.tolist()


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    return statistics.mean(len(set(x) & set(y)) / len(y) for x, y in zip(a, b, strict=True))


def recall(ids: list[list[int]], gold: list[int], k: int) -> float:
    return statistics.mean(float(g in row[:k]) for row, g in zip(ids, gold, strict=True))


def bench_size(n: int, args: argparse.Namespace, processor: Any, bw: float, gflops: float) -> list[str]:
    pages = make_pages(n, args.length, args.dim, args.pages_kind, seed=n)
    queries, gold = make_queries(pages, seed=n)
    ids = [f"p{i}" for i in range(n)]
    rows: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        index = MultiVectorIndex.create(
            Path(tmp) / "idx", args.dim, options=MaxSimOptions(device="cpu", verify=False)
        )
        for s in range(0, n, 2000):
            index.add(ids[s : s + 2000], pages[s : s + 2000])
        index = MultiVectorIndex.open(Path(tmp) / "idx", options=MaxSimOptions(device="cpu", verify=False))
        row_of = {p: i for i, p in enumerate(ids)}

        def hit_rows(hits: list[list[Any]]) -> list[list[int]]:
            return [[row_of[h.page_id] for h in r] for r in hits]

        t_single = time_each(lambda q: index.search([q], k=K), queries[: args.single])
        t_batch, hits = timed(lambda: index.search(queries, k=K), args.repeats)
        ours = hit_rows(hits)
        t_ref, ref_scores = fp32_reference(pages, queries)
        ref = topk_ids(ref_scores, K)
        mem = index.memory_bytes() / n
        rows.append(
            _row(
                n, "ours fp16 exact", t_single, t_batch / Q, mem, agreement(ours, ref), recall(ours, gold, 5)
            )
        )
        rows.append(_row(n, "fp32 exact (ref)", float("nan"), t_ref / Q, mem * 2, 1.0, recall(ref, gold, 5)))
        pooled = MultiVectorIndex.open(
            Path(tmp) / "idx",
            options=MaxSimOptions(device="cpu", verify=False, prefilter="pooled", candidates=args.candidates),
        )
        p_single = time_each(lambda q: pooled.search([q], k=K), queries[: args.single])
        t_pool, phits = timed(lambda: pooled.search(queries, k=K), args.repeats)
        pids = hit_rows(phits)
        rel = recall(pids, gold, 5) / max(recall(ours, gold, 5), 1e-9)
        rows.append(
            _row(
                n,
                f"ours pooled x4 +{args.candidates}",
                p_single,
                t_pool / Q,
                pooled.memory_bytes() / n,
                agreement(pids, ref),
                recall(pids, gold, 5),
                f"recall@5 vs exact {rel:.3f}",
            )
        )
        sub = queries[: args.sr_queries]
        sr_single = time_each(lambda q: processor.score_retrieval([q.half()], pages, batch_size=128), sub[:2])
        t_sr, sr = timed(lambda: processor.score_retrieval([q.half() for q in sub], pages, batch_size=128), 1)
        srids = topk_ids(sr, K)
        rows.append(
            _row(
                n,
                "transformers score_retrieval",
                sr_single,
                t_sr / len(sub),
                mem,
                agreement(srids, ref[: len(sub)]),
                recall(srids, gold[: len(sub)], 5),
                f"ours is {sr_single / t_single:.1f}x faster single, "
                f"{t_sr / len(sub) / (t_batch / Q):.1f}x batched",
            )
        )
        if n <= args.qdrant_max:
            rows.append(_qdrant(n, ids, pages, queries, gold, ref, args, row_of))
        scanned = n * args.length * args.dim * 2
        flops = 2 * Q * LQ * n * args.length * args.dim
        bound_bw, bound_flops = scanned / (bw * 1e9), flops / (gflops * 1e9)
        rows.append(
            f"{n:>6} | bounds: batch of {Q} scans {scanned / 1e6:.0f} MB -> "
            f"{bound_bw * 1e3:.1f} ms at {bw:.1f} GB/s "
            f"(batched measured {t_batch * 1e3:.0f} ms = {t_batch / bound_bw:.1f}x the bandwidth bound); "
            f"{flops / 1e9:.0f} GFLOP -> {bound_flops * 1e3:.0f} ms at {gflops:.0f} GFLOP/s "
            f"(measured = {t_batch / bound_flops:.2f}x that GEMM-rate estimate)"
        )
    return rows


def _qdrant(
    n: int,
    ids: list[str],
    pages: list[torch.Tensor],
    queries: list[torch.Tensor],
    gold: list[int],
    ref: list[list[int]],
    args: argparse.Namespace,
    row_of: dict[str, int],
) -> str:
    try:
        from evidra.retrieval.index.qdrant import QdrantIndex

        qd = QdrantIndex.connect(args.dim, location=":memory:", candidates=0)
    except ImportError:
        return f"{n:>6} | qdrant local: qdrant-client not installed"
    t0 = time.perf_counter()
    for s in range(0, n, 200):
        qd.add(ids[s : s + 200], pages[s : s + 200])
    build = time.perf_counter() - t0
    sub = queries[: args.sr_queries]
    t_single = time_each(lambda q: qd.search([q], k=K), sub[:2])
    t_batch, hits = timed(lambda: qd.search(sub, k=K), 1)
    qids = [[row_of[h.page_id] for h in r] for r in hits]
    return _row(
        n,
        "qdrant local :memory:",
        t_single,
        t_batch / len(sub),
        float("nan"),
        agreement(qids, ref[: len(sub)]),
        recall(qids, gold[: len(sub)], 5),
        f"ingest {n / build:.0f} pages/s",
    )


def _row(
    n: int, name: str, single: float, batched: float, mem: float, agree: float, rec: float, note: str = ""
) -> str:
    single_ms = "-" if single != single else f"{single * 1e3:8.1f}"
    mem_kb = "-" if mem != mem else f"{mem / 1024:6.1f}"
    return (
        f"{n:>6} | {name:<28} | {single_ms:>8} | {batched * 1e3:8.2f} | {1 / batched:8.1f} | {mem_kb:>6} | "
        f"{agree:6.3f} | {rec:5.3f} | {note}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--length", type=int, default=256, help="patch vectors per page")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--pages-kind", choices=["iid", "smooth"], default="iid")
    ap.add_argument("--candidates", type=int, default=256, help="pooled prefilter: pages re-ranked per query")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--single", type=int, default=5, help="queries timed one at a time")
    ap.add_argument("--sr-queries", type=int, default=4, help="queries given to score_retrieval / qdrant")
    ap.add_argument("--qdrant-max", type=int, default=1000, help="largest size run through qdrant local")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from evidra.models.loading import load_colqwen2
    from evidra.models.tiny import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        _, processor = load_colqwen2(build_tiny("colqwen2", Path(tmp) / "colqwen2"))
    bw_copy, bw_sum = bandwidth_gbs()
    gflops = gemm_gflops()
    bw = max(bw_copy, bw_sum)
    print(
        f"threads {args.threads}; read bandwidth {bw_copy:.1f} GB/s (copy), {bw_sum:.1f} GB/s (sum); "
        f"fp16 GEMM {gflops:.0f} GFLOP/s; pages {args.pages_kind} {args.length}x{args.dim}; "
        f"{Q} queries x {LQ}"
    )
    print(
        f"{'pages':>6} | {'method':<28} | single ms | batch ms/q |    q/s   | KB/pg  | agr@10 | R@5   | note"
    )
    for n in args.sizes:
        for row in bench_size(n, args, processor, bw, gflops):
            print(row, flush=True)


if __name__ == "__main__":
    main()
