"""Exact bf16 MaxSim on CPUs with AMX in one fused C kernel (``maxsim_amx.c``).

Where the index scores in bf16 on a CPU with AMX, the torch scorer multiplies a block of pages with
all query tokens on the matrix units and writes the whole ``pages x patches x tokens`` similarity
matrix (640 tokens of a batch: 2.5 KB of fp32 per page vector of 256 bytes), then reads it back for
the max: the output dwarfs the input. This kernel multiplies 16 page vectors by 16 query tokens at
a time in AMX tiles (bf16 products, fp32 sums) and folds each 16 x 16 tile into the tokens'
running maxima with AVX-512 at once; only each token's best similarity per page leaves the core.
The query tokens of a whole batch are packed into tiles of 16 tokens (no padding per query), and
the kernel sums each query's token maxima itself: only the queries' scores per page leave it. Rows
of a tile past a page's length are never folded into a max, so filler cannot win. The index holds
each block as the kernel's tiles (``hold``, ``tile``: 16 vectors x 32 dimensions, 1 KB each, one
after another); blocks in the ordinary row-major layout (pages copied out for a re-score) are
read in place, 16 rows 2 x D bytes apart.

Built with the system C compiler like the AVX-512 kernel (``evidra.retrieval.kernels.native``), with
``-mamx-tile -mamx-bf16`` (gcc 11 or clang 12 and later). Before the first call the process asks
Linux for the tile data registers (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``, Linux
5.16 and later). Without AMX on this machine's own CPU, a compiler that builds it, or that
permission, ``available()`` is False (with one log line) and ``auto`` keeps the torch scorer.
Calls it cannot take (fp32 scoring, blocks not held in bf16, a dimension that is not a multiple of
32) go to the AVX-512 kernel, which passes on what it cannot take to the torch scorer.
"""

from __future__ import annotations

import ctypes
import functools
import logging

import torch
from torch import Tensor

from evidra.retrieval.kernels import maxsim_avx512, native
from evidra.retrieval.kernels.maxsim import Block

logger = logging.getLogger(__name__)

MAX_DIM = 512  # MAX_DIM in the C source
FLAGS = ("-O3", "-mamx-tile", "-mamx-bf16", "-mavx512f", "-mavx512bf16", "-shared", "-fPIC")
KERNEL = native.Kernel("maxsim_amx.c", FLAGS, "AMX")
NEEDS = frozenset({"amx_tile", "amx_bf16", "avx512f"})  # CPU flags it runs on
_ARGS = (
    ctypes.c_void_p,
    *native.BLOCK_ARGS,
    ctypes.c_void_p,
    ctypes.c_int64,
    ctypes.c_void_p,
    ctypes.c_void_p,
)


def cpu_has_amx() -> bool:
    """Whether this machine's own CPU (never a test's stand-in) has AMX tiles with bf16."""
    return native.cpu_flags() >= NEEDS


@functools.cache
def _library() -> ctypes.CDLL | None:
    return native.open_library(FUSED) if cpu_has_amx() else None


def _permitted(lib: ctypes.CDLL) -> bool:
    """Whether Linux lets this process use the tile data registers (asked before the first call)."""
    if lib.evidra_amx_permit() != 0:
        logger.info("Linux refused this process the AMX tile registers: exact search scores in torch")
        return False
    return True


def tile(block: Block) -> Block:
    """``block`` as the kernel's A tiles: ``(C, L'/16, D/32, 16, 32)``, ``L'`` the block's length
    rounded up to 16 (zero vectors past every page's length): each tile of 16 vectors x 32
    dimensions is 1 KB in one piece, so the kernel reads a page front to back, which one query's
    scan (bound by memory) ran 10% faster on than tiles cut out of rows 256 bytes apart."""
    return native.tile_slices(block, "amx", 32)


def untile(block: Block) -> Block:
    """A ``tile`` d block back in the row-major ``(C, L', D)`` layout (a copy)."""
    return native.untile_slices(block, "amx", 32)


def arrange(tokens: Tensor) -> Tensor:
    """Query tokens ``(T, D)`` as the kernel's B tiles: ``(T'/16, D/32, 16, 32)`` bf16, ``T'`` the
    token count rounded up to 16 (zero tokens). Tile ``(j, s)`` row ``r`` holds dimensions
    ``32 s + 2 r`` and ``32 s + 2 r + 1`` of tokens ``16 j .. 16 j + 15``, interleaved."""
    t, dim = tokens.shape
    tiles = -(-t // 16)
    padded = torch.zeros(tiles * 16, dim, dtype=torch.bfloat16)
    padded[:t] = tokens
    # (j, token c, s, r, pair e) -> (j, s, r, c, e)
    return padded.view(tiles, 16, dim // 32, 16, 2).permute(0, 2, 3, 1, 4).contiguous()


FUSED = native.Fused(
    kernel=KERNEL,
    library=_library,
    functions={"evidra_maxsim_amx": _ARGS},
    dtype=torch.bfloat16,
    storage=frozenset({torch.bfloat16}),
    layout="amx",
    width=32,  # tiles (C, L'/16, D/32, 16, 32)
    multiple=32,
    max_dim=MAX_DIM,
    tile=tile,
    untile=untile,
    arrange=arrange,
    scratch=lambda queries: queries.tokens.shape[0] * 16,  # running maxima, one register per 16 tokens
    fallback=maxsim_avx512.score_blocks,
    trailing=lambda queries: (queries.owner.data_ptr(), queries.queries),
    summed=True,  # the kernel sums each query's token maxima itself
    ready=_permitted,
)
available = FUSED.available  # AMX, a compiler that built it and Linux's permission
fits = FUSED.fits  # else the AVX-512 or torch scorer scores
hold = FUSED.hold
score_blocks = FUSED.score_blocks
