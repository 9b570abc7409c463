"""Hybrid retrieval: several retrievers' hits fused into one ranking.

Each retriever returns its top ``depth`` hits for a query; a fusion rule (``FUSIONS``) turns
those lists into one:

* ``zscore`` (the default): each list's scores become z-scores,
  ``(s - mean) / std`` over that list's hits; a page sums ``w_r * z_r(d)`` over the retrievers
  ``r``, and a page that ``r`` did not return counts as ``r``'s lowest z-score.
* ``minmax``: the same with ``(s - min) / (max - min)`` (a missing page counts 0).
* ``rrf``: reciprocal-rank fusion (Cormack, Clarke & Buettcher, SIGIR 2009),
  ``sum_r w_r / (k + rank_r(d))`` with ranks from 1 and ``k = 60`` as in the paper.

A list whose hits all score the same (or hold one hit) gives each of them 1 and a missing page 0.
Ties keep the order in which pages were first seen, retriever by retriever. Why z-scores by
default: docs/retrieval.md (on real manuals they come within 0.01 MRR of RRF when both retrievers
carry signal, and lose a third as much as RRF when one of them ranks at random).

>>> from evidra.retrieval.encoders.bm25 import BM25Retriever
>>> a = BM25Retriever.build({"x": "red fox", "y": "red whale"})
>>> b = BM25Retriever.build({"x": "blue", "y": "whale"})
>>> # a: y, x (z +1, -1); b: y alone (1), x missing (0)
>>> [(h.page_id, round(h.score, 3)) for h in HybridRetriever((a, b)).search(["red whale"], k=2)[0]]
[('y', 2.0), ('x', -1.0)]
>>> rrf = Fusion(rule="rrf")
>>> [(h.page_id, round(h.score, 5)) for h in HybridRetriever((a, b), rrf).search(["red whale"], k=2)[0]]
[('y', 0.03279), ('x', 0.01613)]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry
from evidra.retrieval.interfaces import Exclude, Hit, Retriever, check_exclude, check_k

DEFAULT_RULE = "zscore"
DEFAULT_DEPTH = 100  # a serve-index answers at most --max-k (100) hits per query
DEFAULT_RRF_K = 60


@dataclass(frozen=True)
class Fusion:
    """How the hit lists of several retrievers become one ranking (``FUSIONS`` names the rules)."""

    rule: str = DEFAULT_RULE
    depth: int = DEFAULT_DEPTH  # hits taken from each retriever before fusing
    weights: tuple[float, ...] | None = None  # one per retriever; None: all 1
    rrf_k: int = DEFAULT_RRF_K  # rule "rrf" only

    def __post_init__(self) -> None:
        FUSIONS.get(self.rule)  # an unknown rule: one line naming the known ones
        if isinstance(self.depth, bool) or not isinstance(self.depth, int) or self.depth < 1:
            raise InvalidInputError(f"fusion depth must be an integer >= 1, got {self.depth!r}")
        if isinstance(self.rrf_k, bool) or not isinstance(self.rrf_k, int) or self.rrf_k < 0:
            raise InvalidInputError(f"RRF k must be an integer >= 0, got {self.rrf_k!r}")
        if self.weights is not None and (
            not all(isinstance(w, (int, float)) and math.isfinite(w) and w >= 0 for w in self.weights)
            or not any(self.weights)
        ):
            raise InvalidInputError(
                f"fusion weights must be finite numbers >= 0, not all 0; got {list(self.weights)}"
            )

    def weights_for(self, n: int) -> tuple[float, ...]:
        if self.weights is None:
            return (1.0,) * n
        if len(self.weights) != n:
            raise InvalidInputError(
                f"got {len(self.weights)} fusion weights for {n} retrievers; give one each"
            )
        return self.weights


class FusionRule(Protocol):
    def __call__(
        self, rankings: Sequence[Sequence[Hit]], weights: Sequence[float], fusion: Fusion
    ) -> list[Hit]:
        """Fuse ranked hit lists of one query (one list per retriever) into one list, best first."""


FUSIONS: Registry[FusionRule] = Registry("fusion rule")


def fuse(rankings: Sequence[Sequence[Hit]], fusion: Fusion) -> list[Hit]:
    """``rankings`` (one list per retriever, each cut to ``fusion.depth``) fused by ``fusion.rule``."""
    cut = [list(ranking)[: fusion.depth] for ranking in rankings]
    return FUSIONS.get(fusion.rule)(cut, fusion.weights_for(len(rankings)), fusion)


def _ordered(scores: dict[str, float], rankings: Sequence[Sequence[Hit]]) -> list[Hit]:
    """Hits by fused score, best first; ties in first-seen order; the first image path given."""
    images: dict[str, str] = {}
    for ranking in rankings:
        for hit in ranking:
            if hit.image_path and not images.get(hit.page_id):
                images[hit.page_id] = hit.image_path
    order = sorted(scores, key=lambda pid: -scores[pid])  # stable: first-seen order breaks ties
    return [Hit(pid, scores[pid], images.get(pid, "")) for pid in order]


def rrf_fuse(
    rankings: Sequence[Sequence[Hit]], *, k: int = DEFAULT_RRF_K, weights: Sequence[float] | None = None
) -> list[Hit]:
    """Reciprocal-rank fusion: ``sum_r w_r / (k + rank_r(d))``, best first."""
    weights = [1.0] * len(rankings) if weights is None else list(weights)
    scores: dict[str, float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.page_id] = scores.get(hit.page_id, 0.0) + weight / (k + rank)
    return _ordered(scores, rankings)


Normaliser = Callable[[list[float]], tuple[list[float], float]]  # scores -> (normalised, missing)


def _zscore(scores: list[float]) -> tuple[list[float], float]:
    mean, std = statistics.fmean(scores), statistics.pstdev(scores)
    if not std > 0:  # one hit, or all tied: present beats missing by one unit
        return [1.0] * len(scores), 0.0
    z = [(s - mean) / std for s in scores]
    return z, min(z)


def _minmax(scores: list[float]) -> tuple[list[float], float]:
    lo, hi = min(scores), max(scores)
    if not hi > lo:
        return [1.0] * len(scores), 0.0
    return [(s - lo) / (hi - lo) for s in scores], 0.0


def score_fuse(
    rankings: Sequence[Sequence[Hit]], weights: Sequence[float], normalise: Normaliser
) -> list[Hit]:
    """Weighted sum of each list's normalised scores; a page missing from a list (or scored NaN or
    infinite there) gets that list's value for a missing page."""
    arms = []
    for ranking, weight in zip(rankings, weights, strict=True):
        kept = [h for h in ranking if math.isfinite(h.score)]
        if kept:
            values, missing = normalise([h.score for h in kept])
            arms.append((weight, dict(zip((h.page_id for h in kept), values, strict=True)), missing))
    seen = dict.fromkeys(h.page_id for ranking in rankings for h in ranking)
    scores = {pid: sum(w * vals.get(pid, missing) for w, vals, missing in arms) for pid in seen}
    return _ordered(scores, rankings)


@FUSIONS.register("rrf")
def _rrf(rankings: Sequence[Sequence[Hit]], weights: Sequence[float], fusion: Fusion) -> list[Hit]:
    return rrf_fuse(rankings, k=fusion.rrf_k, weights=weights)


@FUSIONS.register("zscore")
def _zscore_rule(rankings: Sequence[Sequence[Hit]], weights: Sequence[float], fusion: Fusion) -> list[Hit]:
    return score_fuse(rankings, weights, _zscore)


@FUSIONS.register("minmax")
def _minmax_rule(rankings: Sequence[Sequence[Hit]], weights: Sequence[float], fusion: Fusion) -> list[Hit]:
    return score_fuse(rankings, weights, _minmax)


DEFAULT_FUSION = Fusion()


@dataclass(frozen=True, eq=False)
class HybridRetriever:
    """Two or more retrievers (e.g. ColQwen2 + BM25) fused by ``fusion``."""

    retrievers: tuple[Retriever, ...]
    fusion: Fusion = DEFAULT_FUSION

    def __post_init__(self) -> None:
        if len(self.retrievers) < 2:
            raise InvalidInputError(f"hybrid search needs two or more retrievers, got {len(self.retrievers)}")
        self.fusion.weights_for(len(self.retrievers))

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        check_k(k)
        excl = check_exclude(exclude, len(queries))
        depth = max(k, self.fusion.depth)
        per = [r.search(queries, k=depth, exclude=excl) for r in self.retrievers]
        wide = replace(self.fusion, depth=depth)
        return [fuse([hits[i] for hits in per], wide)[:k] for i in range(len(queries))]
