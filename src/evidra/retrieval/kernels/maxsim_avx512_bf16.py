"""Exact bf16 MaxSim on AVX-512 CPUs with AVX512_BF16 in one fused C kernel (``maxsim_avx512_bf16.c``).

On a CPU that multiplies bf16 fast with ``vdpbf16ps`` but has no AMX (an AMD EPYC of the Zen 4
generation and later), ``auto`` scores in bf16, and the torch scorer multiplies a block of pages
with the query tokens and writes the ``pages x patches x tokens`` similarity matrix before taking
the max. One query of 20 tokens is too narrow a GEMM to pay for that: it sat at ~5x its compute
bound. This kernel multiplies two dimensions of 16 page vectors with one broadcast query token per
instruction, keeps 24 tokens' sums in registers and only each token's running max: pages are read
once, in place, and the similarity matrix is never written. Pages are split between
``torch.get_num_threads()`` threads (``evidra.retrieval.kernels.native``). The kernel alone, on 2 EPYC
cores, 10k pages of 256 x 128 held as its tiles, 20-token queries: one query in 47 ms (~280
GFLOP/s; 73 ms on one core), a batch of 32 in 966-973 ms (~430 GFLOP/s) against 1,311-2,282 ms
for the torch scorer in the same run, so it takes batches too.

The index holds each block as the kernel reads it (``hold``, ``tile``: 16 vectors at a time as
``D/2`` rows of 16 pairs of dimensions, ``(C, L'/16, D/2, 16, 2)``), which one query scanned 25%
faster than row-major blocks the kernel transposes in L1 itself; those (pages copied out for a
re-score) are read too. Calls it cannot take (another compute dtype, pages not held in bf16, a
dimension that is not a multiple of 32 or above 512) go, untiled, to the AVX-512 kernel, which
passes on what it cannot take to the torch scorer.

Built with the system C compiler like the other CPU kernels, with ``-mavx512bf16`` (gcc 10 or
clang 9 and later), and only on a CPU whose own flags show AVX512_BF16. Without it, or without a
compiler that builds it, ``available()`` is False (with one log line) and ``auto`` keeps the
torch scorer.
"""

from __future__ import annotations

import ctypes
import functools

import torch
from torch import Tensor

from evidra.retrieval.kernels import maxsim_avx512, native
from evidra.retrieval.kernels.maxsim import Block

GROUP = 24  # query tokens per pass in the kernel (GROUP in the C source)
MAX_DIM = 512  # MAX_DIM in the C source
FLAGS = ("-O3", "-mavx512f", "-mavx512bf16", "-shared", "-fPIC")
KERNEL = native.Kernel("maxsim_avx512_bf16.c", FLAGS, "AVX-512 BF16")
NEEDS = frozenset({"avx512f", "avx512_bf16"})  # CPU flags it runs on
_ARGS = (ctypes.c_void_p, *native.BLOCK_ARGS, ctypes.c_void_p, ctypes.c_void_p)  # pages, ..., maxima, best


def cpu_has_bf16() -> bool:
    """Whether this machine's own CPU (read from /proc/cpuinfo, never a test's stand-in) runs it."""
    return native.cpu_flags() >= NEEDS


@functools.cache
def _library() -> ctypes.CDLL | None:
    # never built, nor loaded, where the instruction is missing
    return native.open_library(FUSED) if cpu_has_bf16() else None


LAYOUT = "avx512_bf16"  # ``Block.layout`` of the blocks this kernel holds


def tile(block: Block) -> Block:
    """``block`` as the kernel reads it without transposing: ``(C, L'/16, D/2, 16, 2)``, ``L'`` the
    block's length rounded up to 16 (zero vectors past every page's length): per 16 vectors, row
    ``k`` holds dimensions ``2k`` and ``2k + 1`` of each, 64 bytes that one instruction reads."""
    return native.tile_slices(block, LAYOUT, 2)


def untile(block: Block) -> Block:
    """A ``tile`` d block back in the row-major ``(C, L', D)`` layout every scorer reads (a copy)."""
    return native.untile_slices(block, LAYOUT, 2)


def arrange(tokens: Tensor) -> Tensor:
    """Query tokens ``(T, D)`` as the kernel reads them: ``(groups, D/2, GROUP)`` int32, each the two
    bf16 values of one token's dimensions ``2k, 2k+1`` (rounded to nearest), zero-padded tokens."""
    t, dim = tokens.shape
    groups = -(-t // GROUP)
    padded = torch.zeros(groups * GROUP, dim, dtype=torch.bfloat16)
    padded[:t] = tokens
    pairs = padded.view(torch.int32)  # (T', D/2): dimension 2k in the low half (little-endian)
    return pairs.view(groups, GROUP, dim // 2).transpose(1, 2).contiguous()


FUSED = native.Fused(
    kernel=KERNEL,
    library=_library,
    functions={"evidra_maxsim_bf16_block": _ARGS},
    dtype=torch.bfloat16,
    storage=frozenset({torch.bfloat16}),
    layout=LAYOUT,
    width=2,  # tiles (C, L'/16, D/2, 16, 2)
    multiple=32,
    max_dim=MAX_DIM,
    tile=tile,
    untile=untile,
    arrange=arrange,
    scratch=lambda queries: queries.count * 16,  # running maxima, one AVX-512 register per token
    fallback=maxsim_avx512.score_blocks,
)
available = FUSED.available  # AVX512_BF16 and a compiler that built it
fits = FUSED.fits  # else the AVX-512 or torch scorer scores
hold = FUSED.hold
score_blocks = FUSED.score_blocks
