"""MaxSim search benchmark: our exact fp16 store vs transformers' score_retrieval vs Qdrant local.

Synthetic unit-norm page embeddings (N pages x L patches x D dims) and 32 queries x 20 tokens.
Half of each query's tokens are noisy copies (cosine ~0.6) of patches of one "gold" page, so
planted recall is measurable; ``--pages-kind smooth`` makes runs of 4 neighbouring patches
similar (as on real pages, where neighbouring patches of white space or text look alike), which
is what positional pooling relies on; ``--pages-kind document`` scatters near-copies of 4
corpus-wide "blank" vectors over 60% of each page's patches (white space anywhere on the page),
which is what clustering relies on. Everything runs in one process on the same queries:

* ``ours fp16``        exact MaxSim, MultiVectorIndex (default settings), single and batched
* ``fp32 exact``       the same blocks in float32: the reference for top-10 agreement
* ``ours pooled``      two-stage: mean-pooled x4 prefilter, exact re-rank of the candidates
* ``ours clustered``   two-stage: k-means-pooled x4 prefilter (same memory), exact re-rank
* ``ours sign bits``   two-stage: 1-bit-per-dimension codes scored asymmetrically, exact re-rank
* ``score_retrieval``  transformers' ColQwen2Processor.score_retrieval (einsum, fp16)
* ``qdrant local``     qdrant-client's embedded mode, exact MAX_SIM (<= 10k pages: at 10k it
                       ingests ~140 pages/s and holds ~230 KB per page; 50k would not fit in 24 GB
                       beside the rest)

It also measures the machine's read bandwidth (large tensor copy / sum) and fp16 GEMM rate and
prints the lower bounds they imply. Run::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/maxsim.py              # 1k and 10k pages
    .venv/bin/python benchmarks/maxsim.py --sizes 1000 10000 50000      # 50k: ~3.3 GB fp16
"""

from __future__ import annotations

import argparse
import functools
import gc
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
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
    blank = torch.nn.functional.normalize(torch.randn(4, dim, generator=g), dim=-1)  # shared "white space"
    pages = []
    for _ in range(n):
        if kind == "smooth":  # runs of 4 patches around a shared base vector (cosine ~0.9)
            base = torch.randn(-(-length // 4), dim, generator=g).repeat_interleave(4, dim=0)[:length]
            page = base + 0.35 * torch.randn(length, dim, generator=g)
        elif kind == "document":  # 60% near-copies of 4 corpus-wide blank vectors, scattered
            is_blank = torch.rand(length, generator=g) < 0.6
            back = blank[torch.randint(4, (length,), generator=g)] + 0.05 * torch.randn(
                length, dim, generator=g
            )
            page = torch.where(is_blank[:, None], back, torch.randn(length, dim, generator=g))
        else:
            page = torch.randn(length, dim, generator=g)
        pages.append(torch.nn.functional.normalize(page, dim=-1).half())
    return pages


def make_queries(
    pages: list[torch.Tensor], seed: int, count: int = Q
) -> tuple[list[torch.Tensor], list[int]]:
    g = torch.Generator().manual_seed(seed + 1)
    gold = torch.randint(len(pages), (count,), generator=g).tolist()
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
    """fp16 GEMM rate on the shape one CPU scoring block uses: pages (16384, D) x tokens (D, Q*Lq)."""
    pages, tokens = torch.randn(16384, 128).half(), torch.randn(Q * LQ, 128).half()
    out = torch.empty(16384, Q * LQ, dtype=torch.float16)
    t, _ = timed(lambda: torch.matmul(pages, tokens.T, out=out), 10, best=True)
    return 2 * Q * LQ * 16384 * 128 / t / 1e9


def topk_ids(scores: torch.Tensor, k: int) -> list[list[int]]:
    return scores.float().topk(k, dim=1).indices.tolist()


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    return statistics.mean(len(set(x) & set(y)) / len(y) for x, y in zip(a, b, strict=True))


def recall(ids: list[list[int]], gold: list[int], k: int) -> float:
    return statistics.mean(float(g in row[:k]) for row, g in zip(ids, gold, strict=True))


@dataclass(frozen=True, eq=False)
class Case:
    """One corpus size: pages, queries with their gold pages, and the fp32 exact top-10."""

    pages: list[torch.Tensor]
    queries: list[torch.Tensor]
    gold: list[int]
    ref: list[list[int]]
    args: argparse.Namespace

    @property
    def n(self) -> int:
        return len(self.pages)

    @property
    def ids(self) -> list[str]:
        return [f"p{i}" for i in range(self.n)]

    def rows_of(self, hits: list[list[Any]]) -> list[list[int]]:
        return [[int(h.page_id[1:]) for h in r] for r in hits]

    def row(
        self, name: str, single: float, batched: float, mem: float, ids: list[list[int]], note: str = ""
    ) -> str:
        m = len(ids)
        return _row(
            self.n,
            name,
            single,
            batched,
            mem,
            agreement(ids, self.ref[:m]),
            recall(ids, self.gold[:m], 5),
            note,
        )


def bench_ours(case: Case, root: Path, options: MaxSimOptions) -> tuple[float, float, float, list[list[int]]]:
    """Single-query and per-query batched latency, memory per page and top-10 rows of our index."""
    index = MultiVectorIndex.open(root, options=options)
    t_single = time_each(lambda q: index.search([q], k=K), case.queries[: case.args.single])
    t_batch, hits = timed(lambda: index.search(case.queries, k=K), case.args.repeats)
    return t_single, t_batch / Q, index.memory_bytes() / case.n, case.rows_of(hits)


def two_stage_row(case: Case, root: Path, prefilter: str, exact_ids: list[list[int]], candidates: int) -> str:
    opts = MaxSimOptions(device="cpu", verify=False, prefilter=prefilter, candidates=candidates)  # type: ignore[arg-type]
    single, batch, mem, ids = bench_ours(case, root, opts)
    rel = recall(ids, case.gold, 5) / max(recall(exact_ids, case.gold, 5), 1e-9)
    name = {"pooled": "ours pooled x4", "clustered": "ours clustered x4", "signbits": "ours sign bits"}[
        prefilter
    ]
    return case.row(f"{name} +{candidates}", single, batch, mem, ids, f"recall@5 vs exact {rel:.3f}")


def bench_size(n: int, args: argparse.Namespace, processor: Any, bw: float, gflops: float) -> list[str]:
    pages = make_pages(n, args.length, args.dim, args.pages_kind, seed=n)
    queries, gold = make_queries(pages, seed=n)
    t_ref, ref_scores = fp32_reference(pages, queries)
    case = Case(pages, queries, gold, topk_ids(ref_scores, K), args)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "idx"
        index = MultiVectorIndex.create(root, args.dim, options=MaxSimOptions(device="cpu", verify=False))
        for s in range(0, n, 2000):
            index.add(case.ids[s : s + 2000], pages[s : s + 2000])
        t_single, t_batch, mem, ours = bench_ours(case, root, MaxSimOptions(device="cpu", verify=False))
        case.args.root = root
        roof = [planted_recall_row(case, root), *roofline_rows(case, bw, gflops)]
        rows = [
            case.row("ours fp16 exact", t_single, t_batch, mem, ours),
            case.row("fp32 exact (ref)", float("nan"), t_ref / Q, mem * 2, case.ref),
            *(
                two_stage_row(case, root, kind, ours, c)
                for kind in ("pooled", "clustered", "signbits")
                for c in case.args.candidates
            ),
        ]
    sr_single, sr_batch, srids = bench_score_retrieval(case, processor)
    note = f"ours is {sr_single / t_single:.1f}x faster single, {sr_batch / t_batch:.1f}x batched"
    rows.append(case.row("transformers score_retrieval", sr_single, sr_batch, mem, srids, note))
    if n <= args.qdrant_max:
        rows.append(bench_qdrant(case))
    return [*rows, *bounds_row(case, t_batch * Q, bw, gflops), *roof]


def bench_score_retrieval(case: Case, processor: Any) -> tuple[float, float, list[list[int]]]:
    sub = case.queries[: case.args.sr_queries]
    single = time_each(lambda q: processor.score_retrieval([q.half()], case.pages, batch_size=128), sub[:2])
    t, scores = timed(
        lambda: processor.score_retrieval([q.half() for q in sub], case.pages, batch_size=128), 1
    )
    return single, t / len(sub), topk_ids(scores, K)


def bounds_row(case: Case, t_batch: float, bw: float, gflops: float) -> list[str]:
    """The batch's time against the two readings of "the bandwidth bound".

    Per query: every query scans every page vector once, so one query's bound is
    ``corpus bytes / bandwidth`` and batched throughput is compared per query with it. Per batch:
    a batch shares one scan, so the bound is the same ``corpus bytes / bandwidth`` for the whole
    batch; a batch of 32 x 20 tokens does 640 flops per byte scanned, far above this CPU's
    flops/byte balance, so that bound is out of reach (``roofline_rows`` shows where it holds).
    """
    scanned = case.n * case.args.length * case.args.dim * 2
    flops = 2 * Q * LQ * case.n * case.args.length * case.args.dim
    bound_bw, bound_flops = scanned / (bw * 1e9), flops / (gflops * 1e9)
    per_query = t_batch / Q
    return [
        f"{case.n:>6} | bandwidth bound per query: {scanned / 1e6:.0f} MB scanned -> "
        f"{bound_bw * 1e3:.1f} ms at {bw:.1f} GB/s; batched {per_query * 1e3:.1f} ms/query "
        f"= {per_query / bound_bw:.2f}x of it",
        f"{case.n:>6} | bounds per batch of {Q}: one shared scan {bound_bw * 1e3:.1f} ms "
        f"(batch measured {t_batch * 1e3:.0f} ms = {t_batch / bound_bw:.1f}x); "
        f"{flops / 1e9:.0f} GFLOP -> {bound_flops * 1e3:.0f} ms at {gflops:.0f} GFLOP/s "
        f"(measured = {t_batch / bound_flops:.2f}x that GEMM-rate estimate)",
    ]


def planted_recall_row(case: Case, root: Path) -> str:
    """Recall@5 of the planted gold page over many queries: exact vs both two-stage modes.

    The timing rows use 32 queries, where one miss moves recall by 0.03; this row scores
    ``--recall-queries`` fresh planted queries (same generator, another seed) so the ratio
    to exact search is resolved to about 1/n.
    """
    queries, gold = make_queries(case.pages, seed=case.n + 17, count=case.args.recall_queries)
    parts = []
    base = 0.0
    for name, prefilter in (
        ("exact", "none"),
        ("pooled x4", "pooled"),
        ("clustered x4", "clustered"),
        ("sign bits", "signbits"),
    ):
        for c in case.args.candidates if prefilter != "none" else [0]:
            opts = MaxSimOptions(device="cpu", verify=False, prefilter=prefilter, candidates=max(c, 1))  # type: ignore[arg-type]
            index = MultiVectorIndex.open(root, options=opts)
            hits = [h for s in range(0, len(queries), Q) for h in index.search(queries[s : s + Q], k=5)]
            r = recall(case.rows_of(hits), gold, 5)
            if prefilter == "none":
                base = r
                parts.append(f"exact {r:.3f}")
            else:
                parts.append(f"{name} +{c} {r:.3f} ({r / max(base, 1e-9):.3f} of exact)")
    return f"{case.n:>6} | planted recall@5 over {len(queries)} queries: " + "; ".join(parts)


def roofline_rows(case: Case, bw: float, gflops: float) -> list[str]:
    """Exact search time per batch against both lower bounds, for growing query batches.

    A batch scans every page vector once (the bandwidth bound) and does 2 * tokens * D flops per
    page vector (the compute bound, at the measured fp16 GEMM rate). Small batches are bound by
    bandwidth, large ones by compute: a batch does ``b * LQ`` flops per byte scanned, so the
    crossover is at about (GEMM rate / bandwidth) / LQ queries. The roofline is the larger bound.
    """
    scanned = case.n * case.args.length * case.args.dim * 2
    index = MultiVectorIndex.open(case.args.root, options=MaxSimOptions(device="cpu", verify=False))
    # shared machines drift: re-measure both rates next to the timings they bound
    bw, gflops = max(max(bandwidth_gbs()), bw), max(gemm_gflops(), gflops)
    rows = [f"{case.n:>6} | roofline rates: read {bw:.1f} GB/s, fp16 GEMM {gflops:.0f} GFLOP/s (best seen)"]
    for b in case.args.roofline:
        t, _ = timed(functools.partial(index.search, case.queries[:b], k=K), case.args.repeats, best=True)
        bound_bw = scanned / (bw * 1e9)
        bound_fl = 2 * b * LQ * case.n * case.args.length * case.args.dim / (gflops * 1e9)
        roof = max(bound_bw, bound_fl)
        rows.append(
            f"{case.n:>6} | roofline, batch {b:>2}: {t * 1e3:7.1f} ms/batch, {b / t:6.1f} q/s | "
            f"bandwidth bound {bound_bw * 1e3:6.1f} ms ({t / bound_bw:4.1f}x) | "
            f"compute bound {bound_fl * 1e3:6.1f} ms ({t / bound_fl:4.1f}x) | {t / roof:4.1f}x the roofline"
        )
    return rows


def rss_bytes() -> float:
    """This process's resident memory now (Linux ``/proc``), NaN elsewhere."""
    try:
        pages = int(Path("/proc/self/statm").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return float("nan")
    return float(pages * os.sysconf("SC_PAGE_SIZE"))


def bench_qdrant(case: Case) -> str:
    try:
        from evidra.retrieval.index.qdrant import QdrantIndex

        qd = QdrantIndex.connect(case.args.dim, location=":memory:", candidates=0)
    except ImportError:
        return f"{case.n:>6} | qdrant local: qdrant-client not installed"
    gc.collect()
    rss0, t0 = rss_bytes(), time.perf_counter()
    for s in range(0, case.n, 200):
        qd.add(case.ids[s : s + 200], case.pages[s : s + 200])
    build = time.perf_counter() - t0
    mem = (rss_bytes() - rss0) / case.n  # resident growth while ingesting: the collection's memory
    sub = case.queries[: case.args.sr_queries]
    t_single = time_each(lambda q: qd.search([q], k=K), sub[:2])
    t_batch, hits = timed(lambda: qd.search(sub, k=K), 1)
    note = f"ingest {case.n / build:.0f} pages/s; KB/pg = resident growth while ingesting"
    return case.row("qdrant local :memory:", t_single, t_batch / len(sub), mem, case.rows_of(hits), note)


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
    ap.add_argument("--pages-kind", choices=["iid", "smooth", "document"], default="iid")
    ap.add_argument(
        "--candidates", type=int, nargs="+", default=[256, 1024], help="two-stage: pages re-ranked per query"
    )
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--recall-queries", type=int, default=320, help="planted queries for the recall row")
    ap.add_argument("--roofline", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32], help="batch sizes")
    ap.add_argument("--single", type=int, default=5, help="queries timed one at a time")
    ap.add_argument("--sr-queries", type=int, default=4, help="queries given to score_retrieval / qdrant")
    ap.add_argument("--qdrant-max", type=int, default=10000, help="largest size run through qdrant local")
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
