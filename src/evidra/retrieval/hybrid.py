"""Hybrid retrieval by reciprocal-rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009).

``score(d) = sum_r w_r / (k + rank_r(d))`` over the retrievers ``r`` that return ``d`` within
their top ``depth`` (ranks start at 1; ``k = 60`` as in the paper). Ties keep the order in which
pages were first seen, retriever by retriever.

>>> from evidra.retrieval.encoders.bm25 import BM25Retriever
>>> a = BM25Retriever.build({"x": "red fox", "y": "red whale"})
>>> b = BM25Retriever.build({"x": "blue", "y": "whale"})
>>> [(h.page_id, round(h.score, 5)) for h in RRFRetriever((a, b)).search(["red whale"], k=2)[0]]
[('y', 0.03279), ('x', 0.01613)]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from evidra.errors import InvalidInputError
from evidra.retrieval.base import Exclude, Hit, Retriever, check_exclude, check_k


def rrf_fuse(
    rankings: Sequence[Sequence[Hit]], *, k: int = 60, weights: Sequence[float] | None = None
) -> list[Hit]:
    """Fuse ranked hit lists of one query into one list, best first."""
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    scores: dict[str, float] = {}
    images: dict[str, str] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.page_id] = scores.get(hit.page_id, 0.0) + weight / (k + rank)
            if hit.image_path and not images.get(hit.page_id):
                images[hit.page_id] = hit.image_path
    order = sorted(scores, key=lambda pid: -scores[pid])  # stable: first-seen order breaks ties
    return [Hit(pid, scores[pid], images.get(pid, "")) for pid in order]


@dataclass(frozen=True, eq=False)
class RRFRetriever:
    """Reciprocal-rank fusion of two or more retrievers (e.g. ColQwen2 + BM25)."""

    retrievers: tuple[Retriever, ...]
    k: int = 60
    depth: int = 100  # hits taken from each retriever before fusing
    weights: tuple[float, ...] | None = None

    def __post_init__(self) -> None:
        if len(self.retrievers) < 2:
            raise InvalidInputError(f"RRF needs two or more retrievers, got {len(self.retrievers)}")
        if self.k < 0 or self.depth < 1:
            raise InvalidInputError(f"RRF needs k >= 0 and depth >= 1, got k={self.k}, depth={self.depth}")
        if self.weights is not None and len(self.weights) != len(self.retrievers):
            raise InvalidInputError(f"got {len(self.weights)} weights for {len(self.retrievers)} retrievers")

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        check_k(k)
        excl = check_exclude(exclude, len(queries))
        per = [r.search(queries, k=max(k, self.depth), exclude=excl) for r in self.retrievers]
        return [
            rrf_fuse([hits[i] for hits in per], k=self.k, weights=self.weights)[:k]
            for i in range(len(queries))
        ]
