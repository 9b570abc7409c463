"""The exact-MaxSim row of ``gpu_suite.py``: the fused Triton kernel vs chunked torch vs ``score_retrieval``.

Synthetic unit-norm pages (N x 256 patches x 128 dims, fp16, resident on the GPU) and 32 planted
queries of 20 tokens (half of each query's tokens are noisy copies of one page's patches, as in
``benchmarks/maxsim.py``). Three scorers on the same vectors: ``evidra.retrieval.kernels.choice``'
``triton`` (one fused kernel) and ``torch`` (a bounded similarity tensor per block), and
transformers' ``ColQwen2Processor.score_retrieval`` (the colpali-engine einsum, batches of 128
pages). Each is timed for a batch of 32 queries (median of 3 after a warm-up, per query) and for
single queries; ``peak MB`` is the memory a batched call needs beyond the resident pages;
``agr@10`` is the top-10 agreement with exact fp32 scores (TF32 off) of the same fp16 vectors.
The dry run scores 96 pages of 16 patches on the CPU, the kernel under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from typing import Any

from gpu_suite_common import Ctx, Entry, RowOutput, peak_growth_mb, synced_median

LQ, K = 20, 10


@functools.lru_cache(maxsize=1)
def _score_retrieval() -> Callable[..., Any]:
    """transformers' ``ColQwen2Processor.score_retrieval``; it reads nothing of the processor
    instance, so it is called unbound (no checkpoint needed for the peer)."""
    from transformers import ColQwen2Processor

    return functools.partial(ColQwen2Processor.score_retrieval, None)


def make_case(n: int, length: int, dim: int, queries: int, device: str, seed: int) -> tuple[Any, Any]:
    """``(N, L, D)`` fp16 unit-norm pages on the CPU and ``queries`` planted ``(LQ, D)`` queries."""
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    chunks = []
    for start in range(0, n, 8192):  # bounded fp32 scratch on the device
        rows = min(8192, n - start)
        chunk = torch.randn(rows, length, dim, generator=g, device=device)
        chunks.append(torch.nn.functional.normalize(chunk, dim=-1).half().cpu())
    pages = torch.cat(chunks)  # (N, L, D) fp16
    gold = torch.randint(n, (queries,), generator=g, device=device).cpu()
    picks = torch.randint(length, (queries, LQ // 2), generator=g, device=device).cpu()
    tokens = torch.randn(queries, LQ, dim, generator=g, device=device).cpu()
    noise = torch.nn.functional.normalize(torch.randn(queries, LQ // 2, dim), dim=-1)
    tokens[:, : LQ // 2] = pages[gold[:, None], picks].float() + 1.33 * noise  # cosine ~0.6 to gold
    return pages, torch.nn.functional.normalize(tokens, dim=-1)


def _topk(scores: Any) -> list[list[int]]:
    return [list(r) for r in scores.float().topk(K, dim=1).indices.tolist()]


def _agreement(a: list[list[int]], b: list[list[int]]) -> float:
    return statistics.mean(len(set(x) & set(y)) / K for x, y in zip(a, b, strict=True))


def _scorers(pages: Any, device: str) -> dict[str, Callable[[list[Any]], Any] | str]:
    import torch

    from evidra.retrieval.kernels import choice as kernels
    from evidra.retrieval.kernels import maxsim

    n = pages.shape[0]
    blocks = maxsim.build_blocks(list(pages.unbind(0)), list(range(n)), dtype=torch.float16, device=device)
    stacked = list(pages.to(device).unbind(0))  # score_retrieval's input: (L, D) each
    out: dict[str, Callable[[list[Any]], Any] | str] = {}
    if kernels.triton_installed():
        kernels.resolve("triton", torch.device(device))  # refuses a CPU without the interpreter
        triton = kernels.KERNELS.get("triton")
        out["triton fused"] = lambda qs: triton(qs, blocks, n, max_elements=1 << 25, dtype=torch.float16)
    else:
        out["triton fused"] = "not run: triton is not installed"
    chunked = kernels.KERNELS.get("torch")
    out["torch chunked"] = lambda qs: chunked(qs, blocks, n, max_elements=1 << 25, dtype=torch.float16)
    sr = _score_retrieval()
    out["score_retrieval"] = lambda qs: sr(
        [q.half() for q in qs], stacked, batch_size=128, output_device=device
    )
    return out


def _reference(pages: Any, queries: list[Any], device: str) -> list[list[int]]:
    """Top-10 rows by exact fp32 scores (TF32 off) of the fp16 vectors."""
    import torch

    from evidra.retrieval.kernels import maxsim

    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        n = pages.shape[0]
        blocks = maxsim.build_blocks(
            list(pages.unbind(0)), list(range(n)), dtype=torch.float32, device=device
        )
        return _topk(maxsim.score_blocks(queries, blocks, n))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32


def bench_size(n: int, ctx: Ctx, shape: tuple[int, int, int], single: int) -> dict[str, Entry]:
    """Every scorer's entry at ``n`` pages (``shape``: patches, dims, queries)."""
    length, dim, nq = shape
    device = ctx.device
    pages, tokens = make_case(n, length, dim, nq, device, seed=n)
    queries = [q.to(device) for q in tokens.unbind(0)]
    ref = _reference(pages, queries, device)
    entries: dict[str, Entry] = {}
    for name, scorer in _scorers(pages, device).items():
        label = f"maxsim {n // 1000}k {name}" if n >= 1000 else f"maxsim {n} {name}"
        if isinstance(scorer, str):
            entries[name] = Entry(label, device, note=scorer)
            continue
        one = statistics.median(
            synced_median(functools.partial(scorer, [q]), 1, device)[0] for q in queries[:single]
        )
        batched, scores = synced_median(functools.partial(scorer, queries), 3 if not ctx.dry else 1, device)
        peak = peak_growth_mb(functools.partial(scorer, queries), device)
        agree = _agreement(_topk(scores), ref)
        entries[name] = Entry(
            label,
            device,
            ms_query=batched / nq * 1e3,
            peak_mb=peak,
            check=f"agr@10 {agree:.3f}",
            note=f"single query {one * 1e3:.2f} ms; {nq} queries x {LQ}; {length}x{dim} fp16 pages",
        )
    return entries


def run(ctx: Ctx) -> RowOutput:
    if ctx.dry:
        sizes, shape, single = [96], (16, 128, 4), 1
    else:
        sizes, shape, single = [10_000, 100_000], (256, 128, 32), 3
    out = RowOutput()
    last: dict[str, Entry] = {}
    for n in sizes:
        last = bench_size(n, ctx, shape, single)
        out.entries.extend(last.values())
    fused, torch_, sr = (last.get(k) for k in ("triton fused", "torch chunked", "score_retrieval"))
    agreements = [float(e.check.split()[-1]) for e in last.values() if e.check]
    out.ok = all(a >= 0.95 for a in agreements)
    if fused is not None and fused.ms_query == fused.ms_query:  # the kernel ran
        assert torch_ is not None and sr is not None
        out.result = {
            "maxsim_triton_vs_torch": f"{torch_.ms_query / fused.ms_query:.3g}",
            "maxsim_triton_vs_score_retrieval": f"{sr.ms_query / fused.ms_query:.3g}",
            "maxsim_agreement": fused.check.split()[-1],
        }
    return out
