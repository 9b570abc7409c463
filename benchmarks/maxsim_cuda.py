"""The CUDA half of ``benchmarks/maxsim.py`` (``--device cuda``): exact MaxSim on one GPU.

Three scorers on the same synthetic pages and queries as the CPU benchmark, page vectors resident
on the GPU in ``--gpu-dtype`` (fp16 by default), queries already on the GPU:

* ``triton fused``        ``evidra.retrieval.kernels.maxsim_triton``: one kernel, one launch per flat array
                          of blocks, writes only the (Q, N) scores
* ``torch chunked``       ``evidra.retrieval.kernels.maxsim.score_blocks``: a (tokens, pages, patches)
                          similarity matrix per block (at most ``max_elements`` entries), then max
                          and sum (what ``kernel="torch"`` and a CUDA machine without Triton run)
* ``score_retrieval``     transformers' ``ColQwen2Processor.score_retrieval`` (einsum over padded
                          batches of 128 pages) with the same fp16 tensors on the GPU

Each is timed for one query at a time (median over ``--single`` queries) and for a batch of 32
(median of ``--repeats`` calls, per query), after one warm-up call (Triton compiles its kernel on
the first call of each shape). ``peak MB`` is the growth of ``torch.cuda.max_memory_allocated``
during one batched call: the memory a scorer needs beyond the resident pages. ``read GB/s`` is
the corpus bytes over one single-query time: one query must read every page vector once.
Top-10 agreement is against fp32 torch scores (TF32 off) of the same fp16 vectors. The last line
is ``RESULT device=cuda triton_vs_torch_single=<x> triton_vs_torch_batched=<y>
triton_vs_score_retrieval_batched=<z> agreement=<a>`` for the largest size: each ratio is the
other scorer's time over the Triton kernel's.

Without a GPU it prints that CUDA is absent and exits.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch
from maxsim_common import K, Q, agreement, make_pages, make_queries, topk_ids

from evidra.retrieval.kernels import maxsim

Scorer = Callable[[list[torch.Tensor]], torch.Tensor]
DEVICE = "cuda"


def cuda_timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of ``fn`` over ``repeats`` synchronised calls after one warm-up call."""
    out = fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def peak_bytes(fn: Callable[[], Any]) -> int:
    """How far one call of ``fn`` raises the allocated GPU memory above what was allocated before."""
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() - before


def scorers(pages: list[torch.Tensor], dtype: torch.dtype, processor: Any) -> dict[str, Scorer | str]:
    """Each scorer by name, or why it cannot run here."""
    n = len(pages)
    blocks = maxsim.build_blocks(pages, list(range(n)), dtype=dtype, device=DEVICE)
    on_gpu = list(torch.stack(pages).to(DEVICE, dtype).unbind(0))  # score_retrieval's input: (L, D) each
    out: dict[str, Scorer | str] = {}
    if importlib.util.find_spec("triton") is not None:
        from evidra.retrieval.kernels import maxsim_triton

        out["triton fused"] = lambda qs: maxsim_triton.score_blocks(qs, blocks, n, dtype=dtype)
    else:
        out["triton fused"] = "Triton is not installed (pip install 'evidra[gpu]'); not run"
    out["torch chunked"] = lambda qs: maxsim.score_blocks(qs, blocks, n, dtype=dtype)
    out["score_retrieval"] = lambda qs: processor.score_retrieval(
        [q.to(dtype) for q in qs], on_gpu, batch_size=128, output_device=DEVICE
    )
    return out


def reference(pages: list[torch.Tensor], queries: list[torch.Tensor]) -> list[list[int]]:
    """Top-10 rows by exact fp32 scores (torch on the GPU, TF32 off) of the fp16 vectors."""
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        blocks = maxsim.build_blocks(pages, list(range(len(pages))), dtype=torch.float32, device=DEVICE)
        return topk_ids(maxsim.score_blocks(queries, blocks, len(pages)), K)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


@dataclass(frozen=True)
class Timing:
    """One scorer at one size: seconds for one query alone and per query in a batch, top-10 agreement."""

    single: float
    batched: float
    agreement: float


def bench_size(n: int, args: argparse.Namespace, processor: Any) -> tuple[list[str], str]:
    """The rows of one corpus size and its RESULT line."""
    dtype = getattr(torch, args.gpu_dtype)
    pages = make_pages(n, args.length, args.dim, args.pages_kind, seed=n)
    queries = [q.to(DEVICE) for q in make_queries(pages, seed=n)[0]]
    ref = reference(pages, queries)
    corpus = n * args.length * args.dim * 2  # bytes of the fp16 page vectors
    rows, timings = [], {}
    for name, scorer in scorers(pages, dtype, processor).items():
        if isinstance(scorer, str):
            rows.append(f"{n:>6} | {name:<16} | {scorer}")
            continue
        single = statistics.median(
            cuda_timed(functools.partial(scorer, [q]), 1)[0] for q in queries[: args.single]
        )
        batched, scores = cuda_timed(functools.partial(scorer, queries), args.repeats)
        peak = peak_bytes(functools.partial(scorer, queries))
        t = timings[name] = Timing(single, batched / Q, agreement(topk_ids(scores, K), ref))
        rows.append(
            f"{n:>6} | {name:<16} | {t.single * 1e3:9.3f} | {t.batched * 1e3:10.4f} | {1 / t.batched:9.0f} | "
            f"{peak / 2**20:8.1f} | {corpus / t.single / 1e9:9.0f} | {t.agreement:6.3f}"
        )
    fused = timings.get("triton fused")
    if fused is None:
        return rows, "RESULT device=cuda triton=absent"
    rows += [
        f"{n:>6} | {other} / triton fused: {t.single / fused.single:.2f}x single, "
        f"{t.batched / fused.batched:.2f}x batched"
        for other, t in timings.items()
        if t is not fused
    ]
    torch_, sr = timings["torch chunked"], timings["score_retrieval"]
    result = (
        f"RESULT device=cuda triton_vs_torch_single={torch_.single / fused.single:.2f} "
        f"triton_vs_torch_batched={torch_.batched / fused.batched:.2f} "
        f"triton_vs_score_retrieval_batched={sr.batched / fused.batched:.2f} agreement={fused.agreement:.3f}"
    )
    return rows, result


def main(args: argparse.Namespace) -> None:
    """Print the CUDA comparison for every ``--sizes`` entry, or that CUDA is absent."""
    if not torch.cuda.is_available():
        print(
            f"CUDA is absent: torch {torch.__version__} sees no GPU here, so the GPU scorers were not "
            "timed; run `python benchmarks/maxsim.py --device cuda` on a CUDA machine (with "
            "`pip install 'evidra[gpu]'` for the Triton kernel)"
        )
        return
    from evidra.models.loading import load_colqwen2
    from evidra.models.tiny import build_tiny

    with tempfile.TemporaryDirectory() as tmp:
        _, processor = load_colqwen2(build_tiny("colqwen2", Path(tmp) / "colqwen2"))
    triton = version("triton") if importlib.util.find_spec("triton") is not None else "not installed"
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}, triton {triton}")
    print(
        f"pages {args.pages_kind} {args.length}x{args.dim} in {args.gpu_dtype} on the GPU; {Q} queries x 20"
    )
    print(
        f"{'pages':>6} | {'method':<16} | single ms | batch ms/q |    q/s    | peak MB  | read GB/s | agr@10"
    )
    result = ""
    for n in args.sizes:
        rows, result = bench_size(n, args, processor)
        for row in rows:
            print(row, flush=True)
    print(result)
