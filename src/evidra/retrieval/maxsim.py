"""Exact late-interaction (MaxSim) scoring as pure tensor functions.

``score(q, d) = sum_i max_j <q_i, d_j>`` over the query's token vectors ``q_i`` and the page's
patch vectors ``d_j`` (ColBERT Eq. 1; ColPali/ColQwen2 and ViDoRe score the same way). Pages
of different lengths are never padded with zero vectors during the max: a zero vector would
put a floor of 0 under every query token's best match, where every real match may be negative.

Layout for speed: pages are sorted by length and cut into ``Block`` s of
shape ``(C, L, D)``; one matmul scores all query tokens of a batch against a whole block. On
GPU the result is ``(T, C, L)`` with the patch axis last, so the max reduction runs over
contiguous memory; on CPU ``(C, L, T)`` measured faster (see ``score_block``). Queries are
packed token-wise and summed per query with ``index_add_``. This is the reference scorer; on CUDA
the store scores the same blocks with a fused Triton kernel that never writes the similarity
matrix (``evidra.retrieval.kernels``, ``evidra.retrieval.maxsim_triton``).

>>> import torch
>>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])            # 2 query tokens
>>> d = torch.tensor([[0.5, 0.5], [1.0, 0.0], [0.0, -1.0]])
>>> float(maxsim(q, d))                                      # max(.5, 1, 0) + max(.5, 0, -1)
1.5
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from evidra.errors import InvalidInputError


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
    """

    vectors: Tensor  # (C, L, D)
    rows: Tensor  # (C,) int64, CPU
    pad: Tensor | None  # (C, L) bool
    lengths: Tensor  # (C,) int64, CPU

    @property
    def n_tokens(self) -> int:
        return int(self.vectors.shape[0] * self.vectors.shape[1])


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
    held in another dtype (16-bit pages scored in fp32) is converted first, into ``widened``
    (flat, ``dtype``, at least ``C*L*D`` elements) when given, so that one buffer serves every
    block instead of a fresh allocation per block. ``buffer`` (flat, ``dtype``, at least ``T*C*L``
    elements) receives the similarity matrix; reusing one buffer across blocks avoids a fresh
    allocation (and its page faults) for every block, which on CPU costs as much as the matmul.

    Two layouts of the similarity matrix, chosen by device (``_TOKENS_LAST``):

    * CPU: ``(C, L, T)``, query tokens last, ``T`` zero-padded to a multiple of 64. The GEMM
      ``pages @ tokens^T`` runs at the CPU matrix units' full tile width and the max over
      ``L`` is an element-wise maximum of contiguous rows. Measured on 2 Xeon (AMX) cores,
      64 pages x 256 patches x 128 dims, fp16: 2.2 ms per block for 640 query tokens against
      4.2 ms with patches last, and 0.29 vs 0.33 ms for one 20-token query (padded to 64).
    * GPU: ``(T, C, L)``, patches last, so the max reduces over contiguous memory.
    """
    dtype = dtype or compute_dtype(block.vectors)
    vectors = block.vectors
    if vectors.dtype == torch.uint8:  # sign-bit codes (C, L, D/8) -> +-1 vectors (C, L, D)
        vectors = unpack_signs(vectors, dtype)
    elif vectors.dtype != dtype and widened is not None and widened.numel() >= vectors.numel():
        vectors = widened[: vectors.numel()].view(vectors.shape).copy_(vectors)  # (C, L, D)
    vectors = vectors.to(dtype)  # no-op when the block is held in dtype
    c, length, dim = vectors.shape
    t = tokens.shape[0]
    q = tokens.to(vectors.dtype)  # no-op when already converted
    pages = vectors.reshape(c * length, dim)  # (C*L, D)
    tokens_last = vectors.device.type in _TOKENS_LAST
    width = -(-t // _TILE) * _TILE if tokens_last else t
    if width != t:
        q = torch.cat([q, q.new_zeros(width - t, dim)])  # (T', D): zero tokens, dropped below
    n = width * c * length
    out = buffer[:n] if buffer is not None and buffer.numel() >= n and buffer.dtype == q.dtype else None
    if tokens_last:
        sims = torch.matmul(pages, q.T, out=None if out is None else out.view(c * length, width))
        sims = sims.view(c, length, width)  # (C, L, T')
        if block.pad is not None:
            sims.masked_fill_(block.pad.unsqueeze(-1), float("-inf"))
        best = sims.amax(dim=1)[:, :t].T.float()  # (T, C)
    else:
        sims = torch.matmul(q, pages.T, out=None if out is None else out.view(width, c * length))
        sims = sims.view(width, c, length)  # (T, C, L)
        if block.pad is not None:
            sims.masked_fill_(block.pad.unsqueeze(0), float("-inf"))
        best = sims.amax(dim=2).float()  # (T, C)
    result = torch.zeros(n_queries, c, dtype=torch.float32, device=best.device)  # (Q, C)
    return result.index_add_(0, owner.to(best.device), best)


_TOKENS_LAST = ("cpu",)  # device types scored in the (C, L, T) layout
_TILE = 64  # query tokens are padded to a multiple of this in that layout


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
    ``dtype`` (default: the blocks' own, float16 for sign-bit codes; see ``evidra.retrieval.compute``
    for choosing one).
    """
    device = blocks[0].vectors.device if blocks else torch.device("cpu")
    out = torch.full((len(queries), n_rows), float("-inf"), dtype=torch.float32, device=device)
    if not blocks:
        return out
    dtype = dtype or compute_dtype(blocks[0].vectors)
    widest = max(b.n_tokens for b in blocks)
    held = blocks[0].vectors
    widened = None  # 16-bit pages scored in fp32 are converted one block at a time, into this
    if held.dtype not in (dtype, torch.uint8):
        widened = torch.empty(widest * held.shape[-1], dtype=dtype, device=device)
    buffer: Tensor | None = None
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
        need = (-(-tokens_so_far // _TILE) * _TILE) * widest  # room for the padded token count
        if buffer is None or buffer.numel() < need:
            buffer = torch.empty(need, dtype=dtype, device=device)
        for block in blocks:
            out[start:end, block.rows.to(device)] = score_block(
                tokens, owner, end - start, block, buffer, dtype, widened
            )
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


def mean_pool(page: Tensor, factor: int) -> Tensor:
    """Mean of each run of ``factor`` consecutive vectors, renormalised: ``(ceil(L/factor), D)``.

    The cheap first stage of two-stage search (Qdrant's pooled-prefetch recipe).
    """
    if factor < 1:
        raise InvalidInputError(f"pool factor must be >= 1, got {factor}")
    if factor == 1:
        return page
    return _run_means(page.float().unsqueeze(0), factor)[0]  # (ceil(L/factor), D)


def cluster_pool(pages: Sequence[Tensor], factor: int, *, iters: int = 5, batch: int = 256) -> list[Tensor]:
    """Pool each page ``(L, D)`` to ``ceil(L/factor)`` cluster means, renormalised: similar vectors
    merge wherever they sit on the page.

    Real pages repeat themselves (blank margins, runs of body text), and ColPali-style token
    pooling merges those near-duplicates by clustering rather than by position (a pooling factor
    of 3 is the usual choice). Here: spherical k-means, started from the consecutive-run means of
    ``mean_pool`` and run ``iters`` rounds, so it is deterministic and never worse-initialised
    than positional pooling; a cluster that empties keeps its previous centre. Pages of equal
    length are clustered together in batches of ``batch``.
    """
    if factor < 1:
        raise InvalidInputError(f"pool factor must be >= 1, got {factor}")
    out: dict[int, Tensor] = {}
    by_length: dict[int, list[int]] = {}
    for i, page in enumerate(pages):
        by_length.setdefault(int(page.shape[0]), []).append(i)
    for length, members in by_length.items():
        for start in range(0, len(members), batch):
            rows = members[start : start + batch]
            stacked = torch.stack([pages[i].float() for i in rows])  # (B, L, D)
            x = torch.nn.functional.normalize(stacked, dim=-1)
            centres = _run_means(x, factor)  # (B, K, D): what mean_pool gives each page
            if factor > 1 and length > 1:
                centres = _kmeans(x, centres, iters)
            out.update(zip(rows, centres, strict=True))
    return [out[i] for i in range(len(pages))]


def _run_means(x: Tensor, factor: int) -> Tensor:
    """Renormalised means of consecutive runs of ``factor`` vectors, for an equal-length batch
    ``(B, L, D)`` at once: ``(B, ceil(L/factor), D)`` (the last run may be short)."""
    b, n, dim = x.shape
    groups = -(-n // factor)
    padded = x.new_zeros(b, groups * factor, dim)
    padded[:, :n] = x
    sums = padded.view(b, groups, factor, dim).sum(dim=2)  # (B, K, D); the last run may be short
    return torch.nn.functional.normalize(sums, dim=-1)  # the mean's direction: counts cancel


def _kmeans(x: Tensor, centres: Tensor, iters: int) -> Tensor:
    """Spherical k-means rounds on a batch: ``x`` (B, L, D) unit rows, ``centres`` (B, K, D)."""
    k = centres.shape[1]
    for _ in range(iters):
        assign = torch.bmm(x, centres.transpose(1, 2)).argmax(dim=-1)  # (B, L): nearest centre
        onehot = torch.nn.functional.one_hot(assign, k).to(x.dtype)  # (B, L, K)
        sums = torch.bmm(onehot.transpose(1, 2), x)  # (B, K, D): members summed per centre
        filled = onehot.sum(dim=1) > 0  # (B, K); an emptied centre keeps its place
        centres = torch.where(filled.unsqueeze(-1), torch.nn.functional.normalize(sums, dim=-1), centres)
    return centres
