"""Fused exact MaxSim on the GPU: one Triton kernel, no similarity tensor in memory.

The torch scorer (``maxsim.score_blocks``) writes the whole ``tokens x pages x patches``
similarity tensor of a block to memory and reads it back to take the max: at 256 patches and 20
query tokens that is 20x the bytes of the page vectors themselves. Here one program scores one
page: it loads the page's patch vectors a tile of ``BLOCK_P`` at a time, multiplies them with a
tile of ``BLOCK_T`` query tokens (fp32 accumulation), keeps the running max per query token in
registers, and after the last tile sums the maxima of each query's tokens and writes one float per
(query, page) straight into the index-wide ``(Q, N)`` score matrix.

Pages are ragged: each one is a run of rows of a flat ``(R, D)`` array, given by its first row and
its length, so padding is never read and never scored (``Block`` s built by ``build_blocks`` are
views of one such array, and all of its pages go out in one launch). Queries are zero-padded to a
common stride ``S`` (a power of two); a token tile holds ``max(1, BLOCK_T // S)`` whole queries,
and each query's sum is a masked row sum over the tile, so no atomics are needed and the scores
are deterministic. Sign-bit codes (``maxsim.pack_signs``) are expanded to +-1 inside the kernel.

This module imports Triton at the top: import it through ``evidra.retrieval.kernels.choice`` only.
Triton's interpreter (``TRITON_INTERPRET=1``) runs the same kernel on CPU tensors with numpy. The
variable must be set before ``import triton``: ``triton.jit`` decides when it wraps a function
whether to compile or interpret it, and Triton's own reductions (``tl.max``, ``tl.sum``) are
wrapped when ``triton.language`` is imported; an interpreted kernel cannot call compiled ones.
Triton 3.9's interpreter multiplies bf16 ``tl.dot`` operands as their raw uint16 bit patterns,
so under the interpreter bf16 tiles are widened to fp32 before the product (``WIDEN``); that is
exact, since bf16 products are exact in fp32, and on the GPU bf16 goes to the tensor cores as is.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import triton
import triton.language as tl
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.retrieval.kernels.maxsim import Block, compute_dtype


@dataclass(frozen=True)
class TritonConfig:
    """Tile sizes of the kernel: each a power of two >= 16 (``tl.dot``'s smallest tile)."""

    block_tokens: int = 64  # query tokens per tile (M of the tile matmul)
    block_patches: int = 64  # page patches per tile (N)
    num_warps: int = 4

    def __post_init__(self) -> None:
        for name in ("block_tokens", "block_patches"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise InvalidInputError(f"TritonConfig.{name} must be a power of two >= 16, got {value}")


@triton.jit  # Triton reads the parameters' annotations: only tl.constexpr belongs there
def _maxsim_kernel(  # type: ignore[no-untyped-def]
    q_ptr,  # (NQ, S, D) query tokens, zero past each query's length
    qlen_ptr,  # (NQ,) int32
    p_ptr,  # (R, D) page vectors, or (R, D/8) uint8 sign codes
    start_ptr,  # (N,) int64: the first row of each page
    plen_ptr,  # (N,) int64: its number of patches
    col_ptr,  # (N,) int64: its column in the output
    out_ptr,  # (NQ, n_cols) float32
    n_queries,
    n_cols,
    DIM: tl.constexpr,
    S: tl.constexpr,  # query stride in tokens, a power of two
    GROUP: tl.constexpr,  # queries per token tile: max(1, BLOCK_T // S)
    BLOCK_T: tl.constexpr,
    BLOCK_P: tl.constexpr,
    BLOCK_D: tl.constexpr,
    SIGNS: tl.constexpr,  # pages are sign-bit codes
    WIDEN: tl.constexpr,  # multiply in fp32: set for bf16 under the interpreter (module docstring)
    PRECISION: tl.constexpr,  # "ieee" for fp32 products (the default on tensor cores is tf32)
):
    page = tl.program_id(0)
    start = tl.load(start_ptr + page)
    length = tl.load(plen_ptr + page)
    col = tl.load(col_ptr + page)
    dims = tl.arange(0, BLOCK_D)
    tok = tl.arange(0, BLOCK_T)
    pat = tl.arange(0, BLOCK_P)
    member = tl.arange(0, GROUP)
    for first in range(0, n_queries, GROUP):
        total = tl.zeros((GROUP,), dtype=tl.float32)
        for t0 in range(0, GROUP * S, BLOCK_T):  # one tile unless a query outgrows it
            flat = t0 + tok  # token position within this group of queries
            qi = first + flat // S
            ti = flat % S
            qlen = tl.load(qlen_ptr + qi, mask=qi < n_queries, other=0)
            live = ti < qlen
            q_off = (qi.to(tl.int64) * S + ti)[:, None] * DIM + dims[None, :]
            q = tl.load(q_ptr + q_off, mask=live[:, None] & (dims[None, :] < DIM), other=0.0)
            if WIDEN:
                q = q.to(tl.float32)
            best = tl.full((BLOCK_T,), float("-inf"), dtype=tl.float32)  # running max per token
            for p0 in range(0, length, BLOCK_P):
                rows = p0 + pat
                inside = rows < length
                d = _page_tile(p_ptr, start + rows, inside, dims, DIM, SIGNS).to(q.dtype)
                sims = tl.dot(q, tl.trans(d), input_precision=PRECISION)  # (BLOCK_T, BLOCK_P) fp32
                sims = tl.where(inside[None, :], sims, float("-inf"))  # filler never wins a max
                best = tl.maximum(best, tl.max(sims, axis=1))
            best = tl.where(live, best, 0.0)
            owner = flat // S  # which query of the group each token belongs to
            total += tl.sum(tl.where(owner[None, :] == member[:, None], best[None, :], 0.0), axis=1)
        qs = first + member
        tl.store(out_ptr + qs.to(tl.int64) * n_cols + col, total, mask=qs < n_queries)


@triton.jit  # Triton reads the parameters' annotations: only tl.constexpr belongs there
def _page_tile(p_ptr, rows, inside, dims, DIM: tl.constexpr, SIGNS: tl.constexpr):  # type: ignore[no-untyped-def]
    """``(BLOCK_P, BLOCK_D)`` vectors of ``rows`` (zero where not ``inside``); sign codes as +-1."""
    at = rows.to(tl.int64)[:, None]
    mask = inside[:, None] & (dims[None, :] < DIM)
    if SIGNS:  # bit 7 - d % 8 of byte d // 8 (numpy's packbits order)
        codes = tl.load(p_ptr + at * (DIM // 8) + (dims // 8)[None, :], mask=mask, other=0)
        tile = ((codes.to(tl.int32) >> (7 - dims % 8)[None, :]) & 1) * 2 - 1
    else:
        tile = tl.load(p_ptr + at * DIM + dims[None, :], mask=mask, other=0.0)
    return tile  # one return: a compiled jit function may not return from inside a branch


_FP32_TILE = 32  # sm_90, D 128: 64x64 fp32 tiles spilled (ptxas -v: 8 KB of spill stores), 32x32 not

# how the kernel runs: decided by ``triton.jit`` when this module was imported (module docstring)
INTERPRETED = type(_maxsim_kernel).__name__ == "InterpretedFunction"


def score_blocks(
    queries: Sequence[Tensor],
    blocks: Sequence[Block],
    n_rows: int,
    *,
    max_elements: int = 0,
    dtype: torch.dtype | None = None,
    config: TritonConfig | None = None,
) -> Tensor:
    """Exact MaxSim of every query against every page in ``blocks``: ``(Q, n_rows)`` float32.

    The same contract as ``maxsim.score_blocks`` (rows in no block score ``-inf``; the products
    run in ``dtype``, default the blocks' own, with fp32 accumulation), without its similarity
    matrix, so ``max_elements`` bounds nothing here. Page vectors held in another float dtype
    than ``dtype`` are converted tile by tile inside the kernel.
    """
    del max_elements  # no similarity matrix to bound
    config = config or TritonConfig()
    device = blocks[0].vectors.device if blocks else torch.device("cpu")
    out = torch.full((len(queries), n_rows), float("-inf"), dtype=torch.float32, device=device)
    if not blocks:
        return out
    dtype = dtype or compute_dtype(blocks[0].vectors)
    tokens, lengths = pad_queries(queries, dtype, device)  # (Q, S, D), (Q,)
    stride = tokens.shape[1]
    # one query of 20 tokens fills a tile of 32, not the 64 a batch gets: no multiplying by zeros
    block_t = min(config.block_tokens, max(16, stride * triton.next_power_of_2(len(queries))))
    block_p = config.block_patches
    if dtype == torch.float32:  # fp32 multiplies on the CUDA cores with its operands in registers:
        block_t, block_p = min(block_t, _FP32_TILE), min(block_p, _FP32_TILE)  # 64x64 tiles spilled
    for base, table in _launches(blocks):
        signs = base.dtype == torch.uint8
        dim = base.shape[1] * 8 if signs else base.shape[1]
        if dim != tokens.shape[2]:
            raise InvalidInputError(
                f"queries have dimension {tokens.shape[2]}, the pages {dim}; they must match"
            )
        _maxsim_kernel[(table.shape[1],)](
            tokens,
            lengths,
            base,
            table[0],
            table[1],
            table[2],
            out,
            len(queries),
            n_rows,
            DIM=dim,
            S=stride,
            GROUP=max(1, block_t // stride),
            BLOCK_T=block_t,
            BLOCK_P=block_p,
            BLOCK_D=max(16, triton.next_power_of_2(dim)),
            SIGNS=signs,
            WIDEN=INTERPRETED and dtype == torch.bfloat16,
            PRECISION="ieee" if dtype == torch.float32 else "tf32",
            num_warps=config.num_warps,
        )
    return out


def pad_queries(queries: Sequence[Tensor], dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor]:
    """Queries ``(L_i, D)`` as one zero-padded ``(Q, S, D)`` tensor in ``dtype`` on ``device``, ``S``
    the longest length rounded up to a power of two, and their lengths ``(Q,)`` int32."""
    if not queries:
        raise InvalidInputError("no queries given; pass at least one (L, D) query embedding")
    for i, q in enumerate(queries):
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != queries[0].shape[1]:
            raise InvalidInputError(
                f"query {i} must be a non-empty (L, {queries[0].shape[1]}) tensor, got shape {tuple(q.shape)}"
            )
    longest = max(int(q.shape[0]) for q in queries)
    stride = triton.next_power_of_2(longest)
    # filled where the queries are (an encoder on the GPU leaves them there), then moved once
    padded = queries[0].new_zeros(len(queries), stride, queries[0].shape[1], dtype=dtype)  # (Q, S, D)
    for i, q in enumerate(queries):
        padded[i, : q.shape[0]] = q.detach().to(padded.device, dtype)
    lengths = torch.tensor([q.shape[0] for q in queries], dtype=torch.int32)
    return padded.to(device), lengths.to(device)


def _launches(blocks: Sequence[Block]) -> list[tuple[Tensor, Tensor]]:
    """One launch per flat array behind ``blocks``: that array as ``(R, width)`` and its pages'
    ``(3, N)`` int64 table of first row, length and output column."""
    groups: dict[tuple[int, torch.dtype], list[Block]] = {}
    for block in blocks:
        key = (block.vectors.untyped_storage().data_ptr(), block.vectors.dtype)
        groups.setdefault(key, []).append(block)
    launches = []
    for members in groups.values():
        vectors = members[0].vectors
        width = vectors.shape[-1]
        storage = vectors.untyped_storage()
        rows = storage.nbytes() // (vectors.element_size() * width)
        base = vectors.new_empty(0).set_(storage, 0, (rows, width), (width, 1))  # (R, width): the whole array
        table = np.concatenate([_table(b) for b in members], axis=1)  # (3, N)
        launches.append((base, torch.from_numpy(table).to(vectors.device)))
    return launches


_TABLES: weakref.WeakKeyDictionary[Block, np.ndarray] = weakref.WeakKeyDictionary()


def _table(block: Block) -> np.ndarray:
    """``(3, C)`` int64: each page's first row in the block's flat array, its length, its row."""
    table = _TABLES.get(block)
    if table is None:
        v = block.vectors
        c, length, width = v.shape
        if not v.is_contiguous() or v.storage_offset() % width:
            raise InvalidInputError("Triton MaxSim needs blocks that are contiguous views of a flat array")
        first = v.storage_offset() // width + np.arange(c, dtype=np.int64) * length
        table = np.stack([first, block.lengths.numpy().astype(np.int64), block.rows.numpy()])
        _TABLES[block] = table
    return table
