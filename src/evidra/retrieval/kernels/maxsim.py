"""Exact late-interaction (MaxSim) scoring as pure tensor functions.

``score(q, d) = sum_i max_j <q_i, d_j>`` over the query's token vectors ``q_i`` and the page's
patch vectors ``d_j`` (ColBERT Eq. 1; ColPali/ColQwen2 and ViDoRe score the same way). Pages
of different lengths are never padded with zero vectors during the max: a zero vector would
put a floor of 0 under every query token's best match, where every real match may be negative.

Layout for speed: pages are sorted by length and cut into ``Block`` s of
shape ``(C, L, D)``; all query tokens of a batch are scored against a block at once, and the
similarities are laid out as suits the device and dtype (``LAYOUTS``, chosen by ``layout_for``):
on GPU ``(T, C, L)`` with the patch axis last, so the max runs over contiguous memory; for 16-bit
GEMMs on CPU ``(C, L, T)`` with tokens padded to the matrix units' tile; for fp32 on CPU a few
pages at a time, widened and multiplied inside the cache, tokens unpadded. Queries are packed
token-wise and summed per query with ``index_add_``. This is the reference scorer; on CUDA
the store scores the same blocks with a fused Triton kernel that never writes the similarity
matrix (``evidra.retrieval.kernels.choice``, ``evidra.retrieval.kernels.maxsim_triton``).

>>> import torch
>>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])            # 2 query tokens
>>> d = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, -1.0]])
>>> float(maxsim(q, d))                                      # max(.5, 1, 0) + max(.5, 0, -1)
1.5
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError


def maxsim(query: Tensor, page: Tensor) -> Tensor:
    """Reference MaxSim of one query ``(Lq, D)`` against one page ``(Ld, D)``: a scalar."""
    return (query.float() @ page.float().T).amax(dim=1).sum()  # (Lq, Ld) -> (Lq,) -> ()


@dataclass(frozen=True, eq=False)
class Block:
    """Pages of similar length stacked as ``(C, L, D)``, zero-filled past each page's length.

    ``rows`` are the pages' row numbers in the owning index and ``lengths`` their patch counts;
    ``pad`` is a ``(C, L)`` mask that is True on filler positions, or None when every page in the
    block has length ``L``. ``build_blocks`` makes the blocks of one call views of one flat
    ``(R, D)`` array, which the fused GPU kernel (``maxsim_triton``) scores in one launch.
    A tiled block holds the same values as the fused CPU kernel of its ``layout`` reads them, 16
    vectors at a time (``L`` a multiple of 16): ``"avx512"`` ``(C, L/16, D, 16)``, one dimension's
    16 values together (``maxsim_avx512.tile``); ``"amx"`` ``(C, L/16, D/32, 16, 32)``, one AMX
    tile of 16 vectors x 32 dimensions after another (``maxsim_amx.tile``); ``"avx512_bf16"``
    ``(C, L/16, D/2, 16, 2)``, dimensions ``2k, 2k+1`` of 16 vectors side by side
    (``maxsim_avx512_bf16.tile``). Only that kernel takes it.
    """

    vectors: Tensor  # (C, L, D), or tiled as ``layout`` says
    rows: Tensor  # (C,) int64, CPU
    pad: Tensor | None  # (C, L) bool
    lengths: Tensor  # (C,) int64, CPU
    layout: str = "rows"  # "rows" (C, L, D), or the kernel whose tiles it holds: "avx512", "amx", ...

    @property
    def tiled(self) -> bool:
        return self.layout != "rows"

    @property
    def length(self) -> int:
        """``L``: vectors per page, filler included."""
        return int(self.vectors.shape[1]) * (16 if self.tiled else 1)

    @property
    def n_tokens(self) -> int:
        return int(self.vectors.shape[0]) * self.length


def build_blocks(
    pages: Sequence[Tensor],
    rows: Sequence[int],
    *,
    max_tokens: int = 16384,
    dtype: torch.dtype = torch.float16,
    device: str | torch.device = "cpu",
) -> list[Block]:
    """Sort ``pages`` (each ``(L_i, D)``) by length and pack them into blocks of <= ``max_tokens``.

    Sorting keeps the filler small: a block pads only up to its own longest page. The blocks
    are consecutive views of one ``(R, D)`` array on ``device``.
    """
    if len(pages) != len(rows):
        raise InvalidInputError(f"build_blocks got {len(pages)} pages but {len(rows)} rows")
    order = sorted(range(len(pages)), key=lambda i: int(pages[i].shape[0]))
    spans: list[tuple[int, int, int]] = []  # (start, end, longest) in ``order``
    start = 0
    while start < len(order):
        longest = int(pages[order[start]].shape[0])
        end = start + 1
        while end < len(order):
            longest_next = int(pages[order[end]].shape[0])
            if (end - start + 1) * longest_next > max_tokens:
                break
            longest, end = longest_next, end + 1
        spans.append((start, end, longest))
        start = end
    if not spans:
        return []
    total = sum((end - start) * longest for start, end, longest in spans)
    flat = torch.empty(total, int(pages[0].shape[1]), dtype=dtype, device=device)  # (R, D)
    blocks, at = [], 0
    for start, end, longest in spans:
        members = order[start:end]
        size = len(members) * longest
        blocks.append(
            _block(
                [pages[i] for i in members],
                [rows[i] for i in members],
                flat[at : at + size].view(len(members), longest, -1),
            )
        )
        at += size
    return blocks


def _block(pages: Sequence[Tensor], rows: Sequence[int], out: Tensor) -> Block:
    """Fill ``out`` ``(C, L, D)`` with ``pages`` (zeros past each one's length): their block."""
    c, length, _ = out.shape
    vectors = out if out.device.type == "cpu" else torch.empty(out.shape, dtype=out.dtype)  # (C, L, D)
    vectors.zero_()
    pad = torch.zeros(c, length, dtype=torch.bool)  # (C, L)
    for i, page in enumerate(pages):
        n = int(page.shape[0])
        vectors[i, :n] = page.to(out.dtype)
        pad[i, n:] = True
    if vectors is not out:
        out.copy_(vectors)  # one host-to-device copy per block
    return Block(
        vectors=out,
        rows=torch.as_tensor(list(rows), dtype=torch.int64),
        pad=pad.to(out.device) if bool(pad.any()) else None,
        lengths=length - pad.sum(dim=1),
    )


def round_up(block: Block, multiple: int = 16) -> Block:
    """``block`` with its length rounded up to ``multiple`` (zero vectors, marked filler)."""
    c, length, dim = block.vectors.shape
    padded = -(-length // multiple) * multiple
    if padded == length:
        return block
    vectors = torch.cat([block.vectors, block.vectors.new_zeros(c, padded - length, dim)], dim=1)
    pad = torch.arange(padded).unsqueeze(0) >= block.lengths.unsqueeze(1)  # (C, L')
    return Block(vectors=vectors, rows=block.rows, pad=pad, lengths=block.lengths)


def pack_queries(queries: Sequence[Tensor]) -> tuple[Tensor, Tensor]:
    """Concatenate query token vectors: ``(T, D)`` plus the query index of each token ``(T,)``."""
    if not queries:
        raise InvalidInputError("no queries given; pass at least one (L, D) query embedding")
    for i, q in enumerate(queries):
        if q.ndim != 2 or q.shape[0] == 0:
            raise InvalidInputError(
                f"query {i} must be a non-empty (L, D) tensor, got shape {tuple(q.shape)}"
            )
    tokens = torch.cat([q.float() for q in queries])  # (T, D)
    owner = torch.repeat_interleave(torch.arange(len(queries)), torch.tensor([q.shape[0] for q in queries]))
    return tokens, owner


def score_block(
    tokens: Tensor,
    owner: Tensor,
    n_queries: int,
    block: Block,
    buffer: Tensor | None = None,
    dtype: torch.dtype | None = None,
    widened: Tensor | None = None,
) -> Tensor:
    """MaxSim scores of packed queries against one block: ``(Q, C)`` float32.

    The matmul runs in ``dtype`` (default: the block's own, float16 for sign-bit codes). A block
    held in another dtype (16-bit pages scored in fp32, sign-bit codes) is converted first, into
    ``widened`` (flat, ``dtype``) when it is large enough, so that one buffer serves every block
    instead of a fresh allocation per block. ``buffer`` (flat, ``dtype``) receives the similarity
    matrix; reusing one buffer across blocks avoids a fresh allocation (and its page faults) for
    every block, which on CPU costs as much as the matmul; the layout's ``scratch`` says how
    large both must be. How the similarities are laid out depends on the device and the dtype
    (``layout_for``); every layout gives the same scores.
    """
    dtype = dtype or compute_dtype(block.vectors)
    q = tokens.to(dtype)  # no-op when already converted
    layout = LAYOUTS[layout_for(block.vectors.device, dtype)]
    return per_query(layout.best(q, block, buffer, widened), owner, n_queries)


def per_query(best: Tensor, owner: Tensor, n_queries: int) -> Tensor:
    """MaxSim scores ``(Q, C)`` from each query token's best similarity per page ``(T, C)``: the sum
    over each query's tokens (``owner``: the query of each token, ``pack_queries``)."""
    if n_queries == 1:
        return best.sum(dim=0, keepdim=True)  # (1, C)
    result = torch.zeros(n_queries, best.shape[1], dtype=torch.float32, device=best.device)  # (Q, C)
    return result.index_add_(0, owner.to(best.device), best)


def _tokens_last(q: Tensor, block: Block, buffer: Tensor | None, widened: Tensor | None) -> Tensor:
    """``(C, L, T')`` similarities, query tokens last and zero-padded to a multiple of ``_TILE``.

    The GEMM ``pages @ tokens^T`` runs at the CPU matrix units' full tile width and the max over
    ``L`` is an element-wise maximum of contiguous rows. Measured on 2 Xeon (AMX) cores, 64 pages
    x 256 patches x 128 dims, fp16: 2.2 ms per block for 640 query tokens against 4.2 ms with
    patches last, and 0.29 vs 0.33 ms for one 20-token query (padded to 64).
    """
    pages = _whole(block, q.dtype, widened)  # (C, L, D)
    c, length, dim = pages.shape
    t = q.shape[0]
    width = -(-t // _TILE) * _TILE
    if width != t:
        q = torch.cat([q, q.new_zeros(width - t, dim)])  # (T', D): zero tokens, dropped below
    out = _room(buffer, width * c * length, q.dtype)
    sims = torch.matmul(
        pages.reshape(c * length, dim), q.T, out=None if out is None else out.view(c * length, width)
    ).view(c, length, width)  # (C, L, T')
    if block.pad is not None:
        sims.masked_fill_(block.pad.unsqueeze(-1), float("-inf"))
    return sims.amax(dim=1)[:, :t].T.float()  # (T, C)


def _patches_last(q: Tensor, block: Block, buffer: Tensor | None, widened: Tensor | None) -> Tensor:
    """``(T, C, L)`` similarities, patches last, so the max reduces over contiguous memory (GPU)."""
    pages = _whole(block, q.dtype, widened)  # (C, L, D)
    c, length, dim = pages.shape
    t = q.shape[0]
    out = _room(buffer, t * c * length, q.dtype)
    sims = torch.matmul(
        q, pages.reshape(c * length, dim).T, out=None if out is None else out.view(t, c * length)
    ).view(t, c, length)  # (T, C, L)
    if block.pad is not None:
        sims.masked_fill_(block.pad.unsqueeze(0), float("-inf"))
    return sims.amax(dim=2).float()  # (T, C)


def _chunked(q: Tensor, block: Block, buffer: Tensor | None, widened: Tensor | None) -> Tensor:
    """A few pages at a time, patches last: ``(p, T, L)`` similarities per chunk of ``p`` pages.

    For fp32 on the CPU. A chunk's pages are widened into a buffer that stays in the cores'
    cache, the batched matmul reads them from there, and the max over patches runs over
    contiguous memory; query tokens are not padded (a 20-token query padded to 64 did 3.2x the
    flops). Measured on 2 idle Xeon cores, 10k pages of 256 x 128 held in fp16: one 20-token
    query 185-234 ms against 304-315 ms for the tokens-last layout; 32 queries alike (~55 ms each).
    """
    vectors = block.vectors
    c, length = int(vectors.shape[0]), int(vectors.shape[1])
    t, dim = q.shape
    per = min(c, max(1, _CHUNK_ROWS // length))  # pages per chunk (pages are never split)
    wide = None if vectors.dtype == q.dtype else _room(widened, per * length * dim, q.dtype)
    sims = _room(buffer, per * t * length, q.dtype)
    if sims is None:
        sims = torch.empty(per * t * length, dtype=q.dtype, device=q.device)
    queries = q.expand(per, t, dim)  # (p, T, D): one GEMM per page, no copy of the query
    best = torch.empty(c, t, dtype=torch.float32, device=q.device)  # (C, T)
    for s in range(0, c, per):
        n = min(per, c - s)
        pages = _widen(vectors[s : s + n], q.dtype, wide)  # (n, L, D)
        chunk = torch.bmm(queries[:n], pages.transpose(1, 2), out=sims[: n * t * length].view(n, t, length))
        if block.pad is not None:
            chunk.masked_fill_(block.pad[s : s + n].unsqueeze(1), float("-inf"))  # (n, T, L)
        torch.amax(chunk, dim=2, out=best[s : s + n])
    return best.T  # (T, C)


def _whole(block: Block, dtype: torch.dtype, widened: Tensor | None) -> Tensor:
    """The block's vectors in ``dtype``: ``(C, L, D)``, converted into ``widened`` when it fits."""
    return _widen(block.vectors, dtype, _room(widened, block.n_tokens * _dim(block), dtype))


def _widen(vectors: Tensor, dtype: torch.dtype, out: Tensor | None) -> Tensor:
    """``vectors`` ``(n, L, D)`` (or sign-bit codes ``(n, L, D/8)``) as ``dtype``, into ``out`` if given."""
    if vectors.dtype == torch.uint8:  # sign-bit codes -> +-1 vectors
        return unpack_signs(vectors, dtype)
    if vectors.dtype == dtype:
        return vectors
    if out is None:
        return vectors.to(dtype)
    return out[: vectors.numel()].view(vectors.shape).copy_(vectors)


def _room(buffer: Tensor | None, n: int, dtype: torch.dtype) -> Tensor | None:
    """The first ``n`` elements of ``buffer`` when it holds that many of ``dtype``, else None."""
    if buffer is None or buffer.numel() < n or buffer.dtype != dtype:
        return None
    return buffer[:n]


def _dim(block: Block) -> int:
    d = int(block.vectors.shape[-1])
    return d * 8 if block.vectors.dtype == torch.uint8 else d


@dataclass(frozen=True)
class Layout:
    """One way to lay out a block's similarities: ``best(q, block, buffer, widened)`` gives the
    best similarity of each query token on each page ``(T, C)``; ``scratch(t, block_tokens, dim)``
    the elements its similarity buffer and its widening buffer need."""

    best: Callable[[Tensor, Block, Tensor | None, Tensor | None], Tensor]
    scratch: Callable[[int, int, int], tuple[int, int]]


LAYOUTS: dict[str, Layout] = {
    "tokens_last": Layout(_tokens_last, lambda t, rows, dim: (-(-t // _TILE) * _TILE * rows, rows * dim)),
    "patches_last": Layout(_patches_last, lambda t, rows, dim: (t * rows, rows * dim)),
    "chunked": Layout(
        _chunked, lambda t, rows, dim: (t * min(rows, _CHUNK_ROWS), min(rows, _CHUNK_ROWS) * dim)
    ),
}


def layout_for(device: torch.device, dtype: torch.dtype) -> str:
    """The similarity layout for ``dtype`` on ``device``: ``chunked`` for fp32 on the CPU (no
    padding, nothing but the scores leaves the cache), ``tokens_last`` for 16-bit GEMMs on the
    CPU (the matrix units' tile width), ``patches_last`` elsewhere."""
    if device.type != "cpu":
        return "patches_last"
    return "chunked" if dtype == torch.float32 else "tokens_last"


_TILE = 64  # query tokens are padded to a multiple of this in the tokens-last layout
# chunked layout: page vectors per chunk, 4 MiB in fp32 at D 128 (the L2 of 2 cores). Smaller chunks
# stay in one core's cache but cost more ops, and with 2 threads every op ends on a barrier: a batch
# of 640 tokens took 5.1 s in chunks of 1.6k vectors and 1.1 s in chunks of 8k (2k pages, 2 busy cores)
_CHUNK_ROWS = 8192


def score_blocks(
    queries: Sequence[Tensor],
    blocks: Sequence[Block],
    n_rows: int,
    *,
    max_elements: int = 1 << 25,
    dtype: torch.dtype | None = None,
) -> Tensor:
    """Exact MaxSim of every query against every page in ``blocks``: ``(Q, n_rows)`` float32.

    Rows not present in any block score ``-inf``. Queries are processed in groups so that one
    similarity matrix never holds more than about ``max_elements`` entries. The matmuls run in
    ``dtype`` (default: the blocks' own, float16 for sign-bit codes; see
    ``evidra.retrieval.kernels.compute_dtype`` for choosing one).
    """
    device = blocks[0].vectors.device if blocks else torch.device("cpu")
    out = torch.full((len(queries), n_rows), float("-inf"), dtype=torch.float32, device=device)
    if not blocks:
        return out
    if any(b.tiled for b in blocks):
        raise InvalidInputError("tiled blocks are scored by the fused CPU kernel that tiled them only")
    dtype = dtype or compute_dtype(blocks[0].vectors)
    widest = max(b.n_tokens for b in blocks)
    layout = LAYOUTS[layout_for(device, dtype)]
    rows = torch.cat([b.rows for b in blocks]).to(device)
    start = 0
    while start < len(queries):
        end, tokens_so_far = start, 0
        while end < len(queries) and (
            end == start or (tokens_so_far + queries[end].shape[0]) * widest <= max_elements
        ):
            tokens_so_far += int(queries[end].shape[0])
            end += 1
        tokens, owner = pack_queries(queries[start:end])
        tokens = tokens.to(device, dtype)
        sims, wide = layout.scratch(tokens_so_far, widest, _dim(blocks[0]))
        buffer = torch.empty(sims, dtype=dtype, device=device)  # one of each for every block
        widened = None  # 16-bit pages scored in fp32 are converted into this, block by block
        if blocks[0].vectors.dtype not in (dtype, torch.uint8):
            widened = torch.empty(wide, dtype=dtype, device=device)
        scores = [score_block(tokens, owner, end - start, b, buffer, dtype, widened) for b in blocks]
        out[start:end, rows] = torch.cat(scores, dim=1)  # one scatter for all blocks: (q, sum C)
        start = end
    return out


def compute_dtype(vectors: Tensor) -> torch.dtype:
    """The dtype a block is scored in: its own, or float16 for sign-bit codes."""
    return torch.float16 if vectors.dtype == torch.uint8 else vectors.dtype


_SIGNS = (
    torch.from_numpy(np.unpackbits(np.arange(256, dtype=np.uint8)[:, None], axis=1)).float() * 2 - 1
)  # (256, 8)


def pack_signs(page: Tensor) -> Tensor:
    """Sign bits of each vector, 8 dims per byte: ``(L, D)`` -> ``(L, D/8)`` uint8.

    The cheap first stage of Vespa's binarised ColPali: ``q . sign(p)`` (asymmetric, the query
    stays float) ranks pages nearly like ``q . p`` at 1/16 of fp16's memory.

    >>> pack_signs(torch.tensor([[1.0, -2, 3, 4, -5, 6, -7, 8]])).tolist()   # bits 10110101
    [[181]]
    """
    if page.shape[-1] % 8:
        raise InvalidInputError(f"sign-bit codes need a dimension divisible by 8, got {page.shape[-1]}")
    return torch.from_numpy(np.packbits(page.float().numpy() > 0, axis=-1))


def unpack_signs(codes: Tensor, dtype: torch.dtype = torch.float16) -> Tensor:
    """Inverse of ``pack_signs`` up to magnitude: ``(..., D/8)`` uint8 -> ``(..., D)`` of +-1."""
    table = _SIGNS.to(codes.device, dtype)  # (256, 8): the 8 signs of each byte value
    # one row gather with int32 indices: ~5x faster on CPU than advanced indexing with int64
    rows = table.index_select(0, codes.reshape(-1).int())  # (n * D/8, 8)
    return rows.view(*codes.shape[:-1], codes.shape[-1] * 8)
