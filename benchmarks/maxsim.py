"""MaxSim search benchmark: our exact store vs transformers' score_retrieval vs Qdrant Edge.

Synthetic unit-norm page embeddings (N pages x L patches x D dims) and 32 queries x 20 tokens.
Half of each query's tokens are noisy copies (cosine ~0.6) of patches of one "gold" page, so
planted recall is measurable; ``--pages-kind smooth`` makes runs of 4 neighbouring patches
similar (as on real pages, where neighbouring patches of white space or text look alike), which
is what positional pooling relies on; ``--pages-kind document`` scatters near-copies of 4
corpus-wide "blank" vectors over 60% of each page's patches (white space anywhere on the page),
which is what clustering relies on. Everything runs in one process on the same queries:

* ``ours exact <dtype>`` exact MaxSim, MultiVectorIndex, single and batched, once per compute
                       dtype (the store's own first: ``auto``'s pick, or ``--compute-dtype``); a
                       dtype whose GEMM is 8x slower than the best runs only ``--sr-queries``
                       queries; fp16 on a CPU without an fp16 hardware path (~1-6 GFLOP/s) runs
                       only with ``--with-fp16``; the note names the kernel that scored
* ``ours exact <dtype> torch``  where the store's own row ran a fused kernel (AVX-512 for fp32,
                       AMX or AVX512_BF16 for bf16): the same dtype scored chunked in torch, the
                       fused kernel's peer
* ``ours pooled``      two-stage: mean-pooled x4 prefilter, exact re-rank of the candidates
* ``ours clustered``   two-stage: k-means-pooled x4 prefilter (same memory), exact re-rank
* ``ours sign bits``   two-stage: 1-bit-per-dimension codes scored asymmetrically, exact re-rank
* ``score_retrieval``  transformers' ColQwen2Processor.score_retrieval (einsum, fp16)
* ``qdrant edge``      Qdrant Edge, Qdrant's engine in this process (what ``--backend qdrant``
                       embeds without a server), exact MAX_SIM over the fp16 vectors with the
                       query rounded to fp16; opt-in with ``--with-qdrant``, sizes up to
                       ``--qdrant-max`` (10k: about a minute of ingest on 2 cores). qdrant-client's
                       pure-Python local mode, which this row ran before, is measured against it
                       in ``benchmarks/qdrant_local.py``
* ``fast-plaid``       PLAID (PyLate's engine) at its defaults, run in its own venv because it pins
                       its own torch: ``--fast-plaid-python .venv-fastplaid/bin/python``
                       (``benchmarks/fast_plaid_peer.py``); without it the row says it was not run

Top-10 agreement is measured against exact fp32 scores of the same fp16 vectors. The header
prints the CPU's model and the flags that decide which GEMMs are fast, the machine's read
bandwidth and the GEMM rate of every compute dtype on one scoring block's shape. The roofline of
a search is the larger of two lower bounds: one scan of the fp16 corpus at the read bandwidth,
and its flops at the best GEMM rate among the dtypes that rank like fp32 (agreement >= 0.99).
Each method's ``roof`` columns give its time over that bound. ``--compute-dtype float32`` makes
this machine stand in for a CPU that computes in fp32 (no fast 16-bit GEMM): the store scores in
fp32 and the compute bound uses the fp32 rate. The last line is
``RESULT single_vs_score_retrieval=<x> batched_vs_roofline=<y> agreement=<z> single_vs_roofline=<s>``
for the largest size: our store's speed-up over score_retrieval for one query, its batched time
per query over the roofline of a batch, its top-10 agreement with fp32, and one query's time
over the roofline of one query. The slow peers are opt-in, and the defaults run one candidate
count and 128 planted queries (the docs' figures: ``--candidates 256 1024 --recall-queries 320``). Run::

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/maxsim.py              # 1k and 10k pages
    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/maxsim.py --compute-dtype float32
    .venv/bin/python benchmarks/maxsim.py --with-qdrant --with-fp16      # every peer and dtype
    .venv/bin/python benchmarks/maxsim.py --sizes 1000 10000 50000      # 50k: ~3.3 GB fp16
    .venv/bin/python benchmarks/maxsim.py --device cuda --sizes 10000   # the GPU scorers

``--device cuda`` times the fused Triton kernel against chunked torch and ``score_retrieval`` on
one GPU instead (``benchmarks/maxsim_cuda.py``); without a GPU it says that CUDA is absent.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import maxsim_cuda  # the sibling files: python puts a script's folder on sys.path
import torch
from maxsim_common import LQ, K, Q, agreement, make_pages, make_queries, recall, topk_ids

from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.interfaces import PageBatch
from evidra.retrieval.kernels import compute_dtype as compute
from evidra.retrieval.kernels.maxsim import build_blocks, score_blocks

AGREE = 0.99  # a dtype that ranks the top 10 like fp32 at least this well may set the compute bound
SLOW = 8.0  # a dtype this much slower than the best runs only --sr-queries queries
CPU = torch.device("cpu")


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


def bandwidth_gbs() -> tuple[float, float]:
    """Read bandwidth (bytes read / s) from a 1 GiB copy and from a sum over 1 GiB of fp32."""
    src = torch.ones(1 << 28, dtype=torch.float32)
    dst = torch.empty_like(src)
    t_copy, _ = timed(lambda: dst.copy_(src), 5, best=True)
    t_sum, _ = timed(lambda: src.sum(), 5, best=True)
    size = src.numel() * 4
    return size / t_copy / 1e9, size / t_sum / 1e9


def gemm_rates(repeats: int = 2) -> dict[str, float]:
    """GEMM rate (GFLOP/s) of every compute dtype on one CPU scoring block: (16384, D) x (D, Q*Lq)."""
    return {
        name: compute.gemm_gflops(dtype, CPU, rows=16384, tokens=Q * LQ, dim=128, repeats=repeats)
        for name, dtype in compute.DTYPES.items()
    }


@dataclass
class Machine:
    """What bounds a search here: read bandwidth (GB/s) and GEMM rate per dtype (GFLOP/s), the
    best seen so far (a lower bound needs peak rates; a shared machine only ever measures low)."""

    bandwidth: float
    rates: dict[str, float]
    exact: frozenset[str] = field(default_factory=frozenset)  # dtypes with agreement >= AGREE
    forced: str = ""  # --compute-dtype: the bounds of a CPU that computes in this dtype

    def see(self, bandwidth: float, rates: dict[str, float]) -> None:
        self.bandwidth = max(self.bandwidth, bandwidth)
        self.rates = {d: max(r, rates.get(d, 0.0)) for d, r in self.rates.items()}

    @property
    def best(self) -> str:
        """The forced dtype, else the fastest among those known to rank like fp32 (fp32 when none is)."""
        return self.forced or max(self.exact or {"float32"}, key=lambda d: self.rates[d])

    def roofline(self, n_pages: int, length: int, dim: int, queries: int) -> float:
        """Seconds one batch of ``queries`` needs at least: a scan of the fp16 corpus, or its flops."""
        scan = n_pages * length * dim * 2 / (self.bandwidth * 1e9)
        flops = 2 * queries * LQ * n_pages * length * dim / (self.rates[self.best] * 1e9)
        return max(scan, flops)


@dataclass(frozen=True, eq=False)
class Case:
    """One corpus size: pages, queries with their gold pages, and the fp32 exact top-10."""

    pages: list[torch.Tensor]
    queries: list[torch.Tensor]
    gold: list[int]
    ref: list[list[int]]
    args: argparse.Namespace
    machine: Machine

    @property
    def n(self) -> int:
        return len(self.pages)

    @property
    def ids(self) -> list[str]:
        return [f"p{i}" for i in range(self.n)]

    def options(self, **kw: Any) -> MaxSimOptions:
        """The store's search options here: CPU, the benchmark's compute dtype, and ``kw``."""
        return MaxSimOptions(device="cpu", verify=False, compute_dtype=self.args.compute_dtype, **kw)

    def rows_of(self, hits: list[list[Any]]) -> list[list[int]]:
        return [[int(h.page_id[1:]) for h in r] for r in hits]

    def roof(self, queries: int) -> float:
        return self.machine.roofline(self.n, self.args.length, self.args.dim, queries)

    def row(
        self, name: str, single: float, batched: float, mem: float, ids: list[list[int]], note: str = ""
    ) -> Row:
        return Row(self, name, single, batched, mem, ids, note)


@dataclass(frozen=True, eq=False)
class Row:
    """One method's measurements; formatted when printed, against the best rates seen by then."""

    case: Case
    name: str
    single: float
    batched: float
    mem: float
    ids: list[list[int]]
    note: str = ""

    def __str__(self) -> str:
        c, m = self.case, len(self.ids)
        single_roof = self.single / c.roof(1)
        batch_roof = self.batched * Q / c.roof(Q)  # per query, against the bound of a batch of Q
        return _row(
            c.n,
            self.name,
            (self.single, self.batched, self.mem),
            (single_roof, batch_roof),
            (agreement(self.ids, c.ref[:m]), recall(self.ids, c.gold[:m], 5)),
            self.note,
        )


@dataclass(frozen=True)
class Ours:
    """One run of our exact store: latencies, memory per page and top-10 rows."""

    dtype: str
    kernel: str
    single: float
    batched: float
    mem: float
    ids: list[list[int]]


def bench_ours(case: Case, root: Path, options: MaxSimOptions, queries: int = Q) -> Ours:
    """Single-query and per-query batched latency, memory per page and top-10 rows of our index."""
    index = MultiVectorIndex.open(root, options=options)
    sub = case.queries[:queries]
    t_single = time_each(lambda q: index.search([q], k=K), sub[: min(case.args.single, queries)])
    t_batch, hits = timed(lambda: index.search(sub, k=K), case.args.repeats if queries == Q else 1)
    return Ours(
        index.compute_dtype,
        index.kernel,
        t_single,
        t_batch / len(sub),
        index.memory_bytes() / case.n,
        case.rows_of(hits),
    )


def exact_rows(case: Case, root: Path) -> tuple[list[Row | str], Ours]:
    """Our exact store in every compute dtype, its own first (``auto``'s choice or the forced
    one); returns the rows and that run."""
    chosen = case.args.compute_dtype
    base = case.options()
    auto = bench_ours(case, root, base)
    label = "(auto)" if chosen == "auto" else "(forced)"
    rows: list[Row | str] = [
        case.row(
            f"ours exact {auto.dtype} {label}", auto.single, auto.batched, auto.mem, auto.ids, auto.kernel
        )
    ]
    if auto.kernel != "torch":  # the fused kernel's peer: the same dtype scored chunked in torch
        peer = bench_ours(case, root, case.options(kernel="torch"))
        note = f"torch kernel; {auto.kernel} is {peer.single / auto.single:.1f}x faster single"
        rows.append(
            case.row(f"ours exact {peer.dtype} torch", peer.single, peer.batched, peer.mem, peer.ids, note)
        )
    best_rate = max(case.machine.rates.values())
    for name in compute.DTYPES:
        if name == auto.dtype:
            continue
        if skipped(name, case.args):
            rows.append(f"{case.n:>6} | ours exact {name}: {skipped(name, case.args)}")
            continue
        slow = case.machine.rates[name] * SLOW < best_rate
        opts = MaxSimOptions(device="cpu", verify=False, compute_dtype=name)  # type: ignore[arg-type]
        run = bench_ours(case, root, opts, case.args.sr_queries if slow else Q)
        note = f"{len(run.ids)} queries: GEMM {case.machine.rates[name]:.0f} GFLOP/s" if slow else ""
        note = f"{note}; {run.kernel}" if note else run.kernel
        rows.append(case.row(f"ours exact {name}", run.single, run.batched, run.mem, run.ids, note))
    return rows, auto


def skipped(dtype: str, args: argparse.Namespace) -> str:
    """Why the rows of ``dtype`` are not run here ("" when they are): fp16 without a hardware path
    (torch's fallback GEMM runs at 1-6 GFLOP/s there) is opt-in."""
    if dtype == "float16" and dtype not in compute.candidates(CPU) and not args.with_fp16:
        return "not run (no fp16 GEMM in hardware here; opt-in: --with-fp16)"
    return ""


def two_stage_row(case: Case, root: Path, prefilter: str, exact_ids: list[list[int]], candidates: int) -> Row:
    opts = case.options(prefilter=prefilter, candidates=candidates)
    run = bench_ours(case, root, opts)
    rel = recall(run.ids, case.gold, 5) / max(recall(exact_ids, case.gold, 5), 1e-9)
    name = {"pooled": "ours pooled x4", "clustered": "ours clustered x4", "signbits": "ours sign bits"}[
        prefilter
    ]
    return case.row(
        f"{name} +{candidates}", run.single, run.batched, run.mem, run.ids, f"recall@5 vs exact {rel:.3f}"
    )


def dtype_agreement(
    pages: list[torch.Tensor], queries: list[torch.Tensor], ref: torch.Tensor, machine: Machine, args: Any
) -> dict[str, tuple[float, float]]:
    """Top-10 agreement with fp32 scores ``ref`` (Q, N) of scoring in each dtype, alone and with
    the best ``K + rescore`` pages per query re-scored in fp32 as the store does for bf16 (a slow
    dtype on ``sr`` queries)."""
    best_rate = max(machine.rates.values())
    ref_ids = topk_ids(ref, K)
    out = {"float32": (1.0, 1.0)}
    for name in ("bfloat16", "float16"):
        if skipped(name, args):
            continue
        dtype = compute.DTYPES[name]
        sub = queries if machine.rates[name] * SLOW >= best_rate else queries[: args.sr_queries]
        blocks = build_blocks(pages, list(range(len(pages))), dtype=dtype)
        scores = score_blocks(sub, blocks, len(pages), dtype=dtype)  # (q, N)
        short = scores.topk(K + MaxSimOptions().rescore, dim=1).indices  # what the store re-scores
        rescored = torch.full_like(scores, float("-inf")).scatter_(1, short, ref[: len(sub)].gather(1, short))
        m = len(sub)
        out[name] = (
            agreement(topk_ids(scores, K), ref_ids[:m]),
            agreement(topk_ids(rescored, K), ref_ids[:m]),
        )
    return out


def bench_size(n: int, args: argparse.Namespace, processor: Any, machine: Machine) -> tuple[list[str], str]:
    """The table rows of one corpus size and its RESULT line."""
    machine.see(max(bandwidth_gbs()), gemm_rates(repeats=3))  # shared machines drift: re-measure
    pages = make_pages(n, args.length, args.dim, args.pages_kind, seed=n)
    queries, gold = make_queries(pages, seed=n)
    blocks = build_blocks(pages, list(range(n)), dtype=torch.float32)
    ref_scores = score_blocks(queries, blocks, n)  # (Q, N) exact fp32
    del blocks
    ref = topk_ids(ref_scores, K)
    agree = dtype_agreement(pages, queries, ref_scores, machine, args)
    # bf16 counts as exact when the store's fp32 re-score of its shortlist ranks like fp32
    machine.exact = frozenset(d for d, (alone, rescored) in agree.items() if max(alone, rescored) >= AGREE)
    case = Case(pages, queries, gold, ref, args, machine)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "idx"
        index = MultiVectorIndex.create(root, args.dim, options=MaxSimOptions(device="cpu", verify=False))
        for s in range(0, n, 2000):
            index.add(case.ids[s : s + 2000], pages[s : s + 2000])
        rows, ours = exact_rows(case, root)
        roof = [planted_recall_row(case, root), *roofline_rows(case, root)]
        rows += [
            two_stage_row(case, root, kind, ours.ids, c)
            for kind in ("pooled", "clustered", "signbits")
            for c in case.args.candidates
        ]
    sr_single, sr_batch, srids = bench_score_retrieval(case, processor)
    note = f"ours is {sr_single / ours.single:.1f}x faster single, {sr_batch / ours.batched:.1f}x batched"
    rows.append(case.row("transformers score_retrieval", sr_single, sr_batch, ours.mem, srids, note))
    if not args.with_qdrant:
        rows.append(f"{n:>6} | qdrant edge: not run (opt-in: --with-qdrant)")
    elif n <= args.qdrant_max:
        rows.append(bench_qdrant(case))
    rows.append(bench_fast_plaid(case))
    head = [
        f"{n:>6} | top-10 agreement with fp32 by compute dtype (alone / best {K}+{MaxSimOptions().rescore} "
        "re-scored in fp32): "
        + ", ".join(f"{d} {a:.3f} / {r:.3f}" for d, (a, r) in agree.items())
        + "".join(f", {d} {skipped(d, args)}" for d in compute.DTYPES if skipped(d, args))
        + f"; bounds from {machine.best} at {machine.rates[machine.best]:.0f} GFLOP/s and "
        f"{machine.bandwidth:.1f} GB/s read (best seen)"
    ]
    result = (
        f"RESULT single_vs_score_retrieval={sr_single / ours.single:.2f} "
        f"batched_vs_roofline={ours.batched * Q / case.roof(Q):.2f} "
        f"agreement={agreement(ours.ids, ref):.3f} "
        f"single_vs_roofline={ours.single / case.roof(1):.2f}"
    )
    return [*head, *map(str, rows), *bounds_row(case, ours.batched * Q), *roof], result


def bench_score_retrieval(case: Case, processor: Any) -> tuple[float, float, list[list[int]]]:
    sub = case.queries[: case.args.sr_queries]
    single = time_each(lambda q: processor.score_retrieval([q.half()], case.pages, batch_size=128), sub[:2])
    t, scores = timed(
        lambda: processor.score_retrieval([q.half() for q in sub], case.pages, batch_size=128), 1
    )
    return single, t / len(sub), topk_ids(scores, K)


def bounds_row(case: Case, t_batch: float) -> list[str]:
    """The batch's time against the two readings of "the bandwidth bound".

    Per query: every query scans every page vector once, so one query's bound is
    ``corpus bytes / bandwidth`` and batched throughput is compared per query with it. Per batch:
    a batch shares one scan, so the bound is the same ``corpus bytes / bandwidth`` for the whole
    batch; a batch of 32 x 20 tokens does 640 flops per byte scanned, far above a CPU's
    flops/byte balance, so that bound is out of reach (``roofline_rows`` shows where it holds).
    """
    m = case.machine
    scanned = case.n * case.args.length * case.args.dim * 2
    flops = 2 * Q * LQ * case.n * case.args.length * case.args.dim
    bound_bw, bound_flops = scanned / (m.bandwidth * 1e9), flops / (m.rates[m.best] * 1e9)
    per_query = t_batch / Q
    return [
        f"{case.n:>6} | bandwidth bound per query: {scanned / 1e6:.0f} MB scanned -> "
        f"{bound_bw * 1e3:.1f} ms at {m.bandwidth:.1f} GB/s; batched {per_query * 1e3:.1f} ms/query "
        f"= {per_query / bound_bw:.2f}x of it",
        f"{case.n:>6} | bounds per batch of {Q}: one shared scan {bound_bw * 1e3:.1f} ms "
        f"(batch measured {t_batch * 1e3:.0f} ms = {t_batch / bound_bw:.1f}x); "
        f"{flops / 1e9:.0f} GFLOP -> {bound_flops * 1e3:.0f} ms at {m.rates[m.best]:.0f} GFLOP/s {m.best} "
        f"(measured = {t_batch / bound_flops:.2f}x that GEMM-rate bound)",
    ]


def planted_recall_row(case: Case, root: Path) -> str:
    """Recall@5 of the planted gold page over many queries: exact vs the two-stage modes.

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
            opts = case.options(prefilter=prefilter, candidates=max(c, 1))
            index = MultiVectorIndex.open(root, options=opts)
            hits = [h for s in range(0, len(queries), Q) for h in index.search(queries[s : s + Q], k=5)]
            r = recall(case.rows_of(hits), gold, 5)
            if prefilter == "none":
                base = r
                parts.append(f"exact {r:.3f}")
            else:
                parts.append(f"{name} +{c} {r:.3f} ({r / max(base, 1e-9):.3f} of exact)")
    return f"{case.n:>6} | planted recall@5 over {len(queries)} queries: " + "; ".join(parts)


def roofline_rows(case: Case, root: Path) -> list[str]:
    """Exact search time (default options) per batch against both lower bounds, for growing batches.

    A batch scans every page vector once (the bandwidth bound) and does 2 * tokens * D flops per
    page vector (the compute bound, at the best GEMM rate among the dtypes that rank like fp32).
    Small batches are bound by bandwidth, large ones by compute: a batch does ``b * LQ`` flops per
    byte scanned, so the crossover is at about (GEMM rate / bandwidth) / LQ queries. The roofline
    is the larger bound.
    """
    m = case.machine
    scanned = case.n * case.args.length * case.args.dim * 2
    index = MultiVectorIndex.open(root, options=case.options())
    # shared machines drift: re-measure both rates next to the timings they bound, keep the best seen
    m.see(max(bandwidth_gbs()), gemm_rates(repeats=3))
    rate = m.rates[m.best]
    rows = [
        f"{case.n:>6} | roofline rates: read {m.bandwidth:.1f} GB/s, {m.best} GEMM {rate:.0f} GFLOP/s "
        f"(best seen); the store scores in {index.compute_dtype}"
    ]
    for b in case.args.roofline:
        t, _ = timed(functools.partial(index.search, case.queries[:b], k=K), case.args.repeats, best=True)
        bound_bw = scanned / (m.bandwidth * 1e9)
        bound_fl = 2 * b * LQ * case.n * case.args.length * case.args.dim / (rate * 1e9)
        rows.append(
            f"{case.n:>6} | roofline, batch {b:>2}: {t * 1e3:7.1f} ms/batch, {b / t:6.1f} q/s | "
            f"bandwidth bound {bound_bw * 1e3:6.1f} ms ({t / bound_bw:4.1f}x) | "
            f"compute bound {bound_fl * 1e3:6.1f} ms ({t / bound_fl:4.1f}x) | "
            f"{t / max(bound_bw, bound_fl):4.1f}x the roofline"
        )
    return rows


def bench_qdrant(case: Case) -> Row | str:
    """Qdrant Edge, exhaustive (``candidates=0``), its shard in a temporary folder."""
    from evidra.core.errors import MissingDependencyError
    from evidra.retrieval.index.qdrant_edge import EdgeQdrantIndex

    with tempfile.TemporaryDirectory() as tmp:
        try:
            qd = EdgeQdrantIndex.create(Path(tmp) / "shard", case.args.dim, candidates=0)
        except MissingDependencyError:
            return f"{case.n:>6} | qdrant edge: qdrant-edge-py not installed (pip install -e '.[qdrant]')"
        with qd:
            t0 = time.perf_counter()
            qd.add_batches(
                PageBatch(case.ids[s : s + 500], case.pages[s : s + 500], None) for s in range(0, case.n, 500)
            )
            build = time.perf_counter() - t0
            disk = sum(f.stat().st_blocks * 512 for f in (Path(tmp) / "shard").rglob("*") if f.is_file())
            sub = case.queries[: case.args.sr_queries]
            t_single = time_each(lambda q: qd.search([q], k=K), sub[:2])
            t_batch, hits = timed(lambda: qd.search(sub, k=K), 1)
    note = f"ingest {case.n / build:.0f} pages/s; KB/pg = shard on disk"
    return case.row("qdrant edge", t_single, t_batch / len(sub), disk / case.n, case.rows_of(hits), note)


def bench_fast_plaid(case: Case) -> Row | str:
    """fast-plaid at its defaults, run by ``benchmarks/fast_plaid_peer.py`` in its own environment
    (``--fast-plaid-python``): it pins its own torch, so it cannot share this process."""
    python = case.args.fast_plaid_python
    if not python:
        return (
            f"{case.n:>6} | fast-plaid: not run (opt-in: --fast-plaid-python PATH; it pins its own torch "
            "build, so it runs from its own venv)"
        )
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "case.pt"
        exact = torch.tensor(case.ref)[:, :K]
        torch.save(
            {
                "pages": case.pages,
                "queries": case.queries,
                "exact": exact,
                "k": K,
                "threads": case.args.threads,
            },
            data,
        )
        script = Path(__file__).with_name("fast_plaid_peer.py")
        proc = subprocess.run([python, str(script), str(data)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{case.n:>6} | fast-plaid: failed in {python} ({reason[:160]})"
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    note = f"build {out['build_s']:.1f} s; torch {out['torch']} in its own venv; KB/pg = index on disk"
    single, batched = out["single_ms"] / 1e3, out["batched_ms"] / 1e3
    return case.row("fast-plaid (PLAID defaults)", single, batched, out["bytes_per_page"], out["ids"], note)


def _row(
    n: int,
    name: str,
    times: tuple[float, float, float],
    roofs: tuple[float, float],
    quality: tuple[float, float],
    note: str = "",
) -> str:
    single, batched, mem = times
    single_ms = "-" if single != single else f"{single * 1e3:8.1f}"
    mem_kb = "-" if mem != mem else f"{mem / 1024:6.1f}"
    single_roof = "-" if single != single else f"{roofs[0]:6.1f}"
    return (
        f"{n:>6} | {name:<28} | {single_ms:>8} | {batched * 1e3:8.2f} | {1 / batched:8.1f} | "
        f"{single_roof:>6} | {roofs[1]:6.1f} | {mem_kb:>6} | {quality[0]:6.3f} | {quality[1]:5.3f} | {note}"
    )


def header(args: argparse.Namespace, machine: Machine, bw: tuple[float, float]) -> list[str]:
    """The machine (CPU model and flags, bandwidth, GEMM rates), the peers found and the columns."""
    rates = ", ".join(f"{d} {r:.0f}" for d, r in machine.rates.items())
    allowed = compute.candidates(CPU)
    auto = compute.choose({d: machine.rates[d] for d in allowed}, allowed)
    peers = ["transformers score_retrieval"]
    qdrant = importlib.util.find_spec("qdrant_edge") is not None
    if not args.with_qdrant:
        peers.append("qdrant edge: not run (opt-in: --with-qdrant)")
    else:
        peers.append("qdrant edge" if qdrant else "qdrant edge: qdrant-edge-py not installed, skipped")
    plaid = args.fast_plaid_python
    peers.append(f"fast-plaid via {plaid}" if plaid else "fast-plaid: not run (opt-in: --fast-plaid-python)")
    return [
        f"cpu: {compute.cpu_features().summary()}; torch {torch.__version__} "
        f"({torch.backends.cpu.get_cpu_capability()})",
        f"threads {args.threads}; store computes in {args.compute_dtype}; "
        f"read bandwidth {bw[0]:.1f} GB/s (copy), {bw[1]:.1f} GB/s (sum); "
        f"GEMM 16384x128 @ 128x{Q * LQ} in GFLOP/s: {rates}; by these rates auto would pick {auto} "
        f"of {', '.join(allowed)}",
        f"pages {args.pages_kind} {args.length}x{args.dim}; {Q} queries x {LQ}; peers: " + "; ".join(peers),
        f"{'pages':>6} | {'method':<28} | single ms | batch ms/q |    q/s   | 1q/roof | bq/roof | KB/pg  "
        "| agr@10 | R@5   | note",
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--length", type=int, default=256, help="patch vectors per page")
    ap.add_argument("--dim", type=int, default=128)
    ap.add_argument("--pages-kind", choices=["iid", "smooth", "document"], default="iid")
    ap.add_argument(
        "--candidates",
        type=int,
        nargs="+",
        default=[256],
        help="two-stage: pages re-ranked per query (docs: 256 1024)",
    )
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--recall-queries", type=int, default=128, help="planted queries for the recall row (docs: 320)"
    )
    ap.add_argument("--roofline", type=int, nargs="*", default=[1, 2, 4, 8, 16, 32], help="batch sizes")
    ap.add_argument("--single", type=int, default=5, help="queries timed one at a time")
    ap.add_argument(
        "--sr-queries", type=int, default=4, help="queries given to score_retrieval / qdrant / slow dtypes"
    )
    ap.add_argument(
        "--with-qdrant", action="store_true", help="run Qdrant Edge too (about a minute of ingest at 10k)"
    )
    ap.add_argument("--qdrant-max", type=int, default=10000, help="largest size run through qdrant edge")
    ap.add_argument(
        "--with-fp16",
        action="store_true",
        help="fp16 rows even without an fp16 GEMM in hardware",
    )
    ap.add_argument(
        "--compute-dtype",
        choices=list(compute.CHOICES),
        default="auto",
        help="the store's compute dtype; float32 stands in for a CPU without fast 16-bit GEMMs",
    )
    ap.add_argument(
        "--fast-plaid-python",
        default="",
        metavar="PATH",
        help="python of a venv with fast-plaid installed (it pins its own torch): runs the PLAID peer",
    )
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="cuda: the GPU scorers instead")
    ap.add_argument("--gpu-dtype", choices=["float16", "bfloat16"], default="float16", help="--device cuda")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.device == "cuda":
        maxsim_cuda.main(args)
        return
    from evidra.models.loading import load_colqwen2
    from evidra.models.tiny import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        _, processor = load_colqwen2(build_tiny("colqwen2", Path(tmp) / "colqwen2"))
    bw = bandwidth_gbs()
    forced = "" if args.compute_dtype == "auto" else args.compute_dtype
    machine = Machine(max(bw), gemm_rates(), forced=forced)
    for line in header(args, machine, bw):
        print(line, flush=True)
    result = ""
    for n in args.sizes:
        rows, result = bench_size(n, args, processor, machine)
        for row in rows:
            print(row, flush=True)
    print(result)


if __name__ == "__main__":
    main()
