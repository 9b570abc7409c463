"""Exact fp32 MaxSim on AVX-512 CPUs in one fused C kernel (``maxsim_avx512.c``).

Where the CPU computes in fp32 (no fast 16-bit GEMM) and the pages are held in 16 bits, the
chunked torch scorer widens every block into a buffer and multiplies it with MKL in a second pass;
at one query (20 tokens) that GEMM is too narrow to run at its batched rate, and one query sat at
4.5-5.5x its compute bound. This kernel reads each page once in its stored dtype (fp16, bf16 or
fp32), widens and transposes 16 vectors at a time into a tile in L1, multiply-adds up to 24 query
tokens against the tile in registers and keeps only each token's running max: no widened copy,
no similarity matrix. Pages are split between ``torch.get_num_threads()`` threads, each running
the kernel on its own range of pages (the call releases the GIL).

The kernel is compiled from its C source with the system C compiler at its first use and cached
(``evidra.retrieval.kernels.native``, which also splits the pages between threads). Without a
compiler, or on a CPU without AVX-512F, ``available()`` is False and ``auto`` keeps the torch
scorer (``evidra.retrieval.kernels.choice``). Calls this kernel cannot take (another compute dtype,
sign-bit codes, a dimension that is not a multiple of 16 or above 256) go to the torch scorer.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from evidra.retrieval.kernels import maxsim, native
from evidra.retrieval.kernels.maxsim import Block

GROUP = 24  # query tokens per pass in the kernel (GROUP in the C source)
MAX_DIM = 256
FLAGS = ("-O3", "-mavx512f", "-mfma", "-mf16c", "-shared", "-fPIC")
KERNEL = native.Kernel("maxsim_avx512.c", FLAGS, "AVX-512")
_KINDS = {torch.float32: 0, torch.float16: 1, torch.bfloat16: 2}
# pages, their dtype's code (``_KINDS``), BLOCK_ARGS, running maxima, best
_ARGS = (ctypes.c_void_p, ctypes.c_int, *native.BLOCK_ARGS, ctypes.c_void_p, ctypes.c_void_p)
_PAGE_ARGS = (
    ctypes.c_void_p,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_int,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_void_p,
)


def cpu_has_avx512() -> bool:
    """Whether this machine's own CPU (read from /proc/cpuinfo, never a test's stand-in) runs it."""
    return "avx512f" in native.cpu_flags()


def compile_kernel(compiler: str | None = None, folder: Path | None = None) -> Path:
    """The compiled kernel's path (``native.compile_kernel``)."""
    return native.compile_kernel(KERNEL, compiler, folder)


@functools.cache
def _library() -> ctypes.CDLL | None:
    return native.open_library(FUSED) if cpu_has_avx512() else None


def score_pages(
    queries: Sequence[Tensor], pages: Sequence[Tensor], rows: Sequence[int], n_rows: int, dtype: torch.dtype
) -> Tensor | None:
    """Exact fp32 MaxSim of every query against ``pages`` (each ``(L_i, D)``, e.g. views of the
    index's memory-mapped shards), read where they are: no copy into blocks, which for the few
    pages of a re-score costs more than scoring them. ``(Q, n_rows)`` float32, ``-inf`` for rows
    not in ``rows``; None where this kernel cannot score them (the caller builds blocks)."""
    lib = _library()
    if lib is None or dtype != torch.float32 or not _fit_pages(pages):
        return None
    tokens, owner = maxsim.pack_queries(queries)  # (T, D)
    held = _InPlace(lib, pages, _arrange(tokens), int(tokens.shape[0]))
    native.run_each(held.score, native.spans(held.lengths, native.shares(int(held.lengths.sum()))))
    out = torch.full((len(queries), n_rows), float("-inf"), dtype=torch.float32)
    out[:, torch.as_tensor(list(rows), dtype=torch.int64)] = maxsim.per_query(
        held.best.T, owner, len(queries)
    )
    return out


def score_each(
    queries: Sequence[Tensor], pages: Sequence[Sequence[Tensor]], dtype: torch.dtype
) -> list[Tensor] | None:
    """Exact fp32 MaxSim of each query against its own ``pages`` (read where they are, as in
    ``score_pages``): ``(C_i,)`` float32 per query, the queries scored side by side on
    ``torch.get_num_threads()`` threads. None where this kernel cannot score them."""
    lib = _library()
    if lib is None or dtype != torch.float32 or not all(_fit_pages(p) for p in pages if p):
        return None
    scores = [torch.empty(0, dtype=torch.float32) for _ in pages]

    def one(i: int) -> None:
        tokens = queries[i].float()  # (T_i, D)
        held = _InPlace(lib, pages[i], _arrange(tokens), int(tokens.shape[0]))
        held.score((0, len(pages[i])))
        scores[i] = held.best.sum(dim=1)  # (C_i,)

    native.run_each(one, [i for i, p in enumerate(pages) if p])
    return scores


class _InPlace:
    """Pages scored where they are: their addresses and lengths, and each token's best (C, T)."""

    def __init__(self, lib: ctypes.CDLL, pages: Sequence[Tensor], queries: Tensor, tokens: int) -> None:
        self.lib, self.queries, self.tokens = lib, queries, tokens
        self.lengths = torch.tensor([p.shape[0] for p in pages], dtype=torch.int64)
        self.pointers = (ctypes.c_void_p * len(pages))(*[p.data_ptr() for p in pages])
        self.kind, self.dim = _KINDS[pages[0].dtype], int(pages[0].shape[1])
        self.best = torch.empty(len(pages), tokens, dtype=torch.float32)  # (C, T)

    def score(self, span: tuple[int, int]) -> None:
        """Pages ``[begin, end)`` (one call, the GIL released)."""
        begin, end = span
        runs = native.aligned(self.tokens * 16)
        at = ctypes.addressof(self.pointers) + begin * ctypes.sizeof(ctypes.c_void_p)
        self.lib.evidra_maxsim_pages(
            at,
            self.lengths[begin:].data_ptr(),
            end - begin,
            self.kind,
            self.dim,
            self.queries.data_ptr(),
            self.tokens,
            runs.data_ptr(),
            self.best[begin:].data_ptr(),
        )


def _fit_pages(pages: Sequence[Tensor]) -> bool:
    if not pages:
        return False
    first = pages[0]
    dim = int(first.shape[-1]) if first.ndim == 2 else 0
    return (
        first.dtype in _KINDS
        and dim % 16 == 0
        and 0 < dim <= MAX_DIM
        and all(
            p.ndim == 2
            and p.shape[1] == dim
            and p.dtype == first.dtype
            and p.device.type == "cpu"
            and p.is_contiguous()
            for p in pages
        )
    )


def tile(block: Block) -> Block:
    """``block`` in the layout this kernel reads without transposing: ``(C, L'/16, D, 16)``, ``L'``
    the block's length rounded up to 16 (the extra vectors are zeros past every page's length)."""
    if block.tiled:
        return block
    block = maxsim.round_up(block)
    c, length, dim = block.vectors.shape
    tiles = block.vectors.view(c, length // 16, 16, dim).transpose(2, 3).contiguous()  # (C, L'/16, D, 16)
    return Block(vectors=tiles, rows=block.rows, pad=block.pad, lengths=block.lengths, layout="avx512")


def untile(block: Block) -> Block:
    """A tiled ``block`` back in the row-major ``(C, L', D)`` layout every scorer reads (a copy)."""
    if block.layout != "avx512":
        return block
    c, n_tiles, dim, _ = block.vectors.shape
    vectors = block.vectors.transpose(2, 3).reshape(c, n_tiles * 16, dim)
    return Block(vectors=vectors, rows=block.rows, pad=block.pad, lengths=block.lengths)


def _arrange(tokens: Tensor) -> Tensor:
    """Query tokens ``(T, D)`` as the kernel reads them: ``(groups, D, GROUP)``, zero-padded."""
    t, dim = tokens.shape
    groups = -(-t // GROUP)
    padded = torch.zeros(groups * GROUP, dim, dtype=torch.float32)
    padded[:t] = tokens
    return padded.view(groups, GROUP, dim).transpose(1, 2).contiguous()


FUSED = native.Fused(
    kernel=KERNEL,
    library=_library,
    functions={"evidra_maxsim_block": _ARGS, "evidra_maxsim_pages": _PAGE_ARGS},
    dtype=torch.float32,
    storage=frozenset(_KINDS),
    layout="avx512",
    width=1,  # tiles (C, L'/16, D, 16)
    multiple=16,
    max_dim=MAX_DIM,
    tile=tile,
    untile=untile,
    arrange=_arrange,
    scratch=lambda queries: queries.count * 16,  # running maxima, one AVX-512 register per token
    fallback=maxsim.score_blocks,
    leading=lambda block: (_KINDS[block.vectors.dtype],),
)
available = FUSED.available  # an AVX-512 CPU and a C compiler that built it
fits = FUSED.fits  # else the torch scorer scores
hold = FUSED.hold
score_blocks = FUSED.score_blocks
