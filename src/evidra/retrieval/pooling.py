"""Fewer vectors per page for the cheap first stage of two-stage MaxSim search.

``mean_pool`` averages runs of consecutive patch vectors (Qdrant's pooled-prefetch recipe);
``cluster_pool`` averages clusters of similar vectors wherever they sit on the page (ColPali-style
token pooling). Both renormalise, so pooled vectors score like page vectors.

>>> import torch
>>> pooled = mean_pool(torch.tensor([[1.0, 0.0], [0.0, 1.0], [3.0, 4.0]]), 2)  # runs of 2: 2 vectors
>>> [[round(x, 4) for x in row] for row in pooled.tolist()]  # mean (.5, .5) renormalised; (3, 4) / 5
[[0.7071, 0.7071], [0.6, 0.8]]
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError


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
