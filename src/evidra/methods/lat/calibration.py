"""The threshold tau of LAT's R_step (Eq. 8, S_t >= tau) for a similarity other than ColQwen2.

LAT's tau = 0.3 (§4) was calibrated on ColQwen2's late-interaction score. The offline word-overlap
similarity (``TextOverlapSimilarity``: token F1 of the words inside the box and the step text) is
on another scale, so its tau is calibrated on labelled steps: the threshold at which "score >= tau"
agrees best with the labels (correct step / incorrect step). ``benchmarks/calibrate_lat_tau.py``
labels the steps of evidra's synthetic documents and records the value evidra uses
(``similarity.TEXT_OVERLAP_TAU``, docs/methods.md).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError


@dataclass(frozen=True)
class Calibration:
    """The chosen threshold and how well it separates the labelled steps."""

    tau: float
    balanced_accuracy: float  # mean of the rates of correct steps kept and incorrect steps refused
    correct: int  # labelled steps of each kind
    incorrect: int


def balanced_accuracy(scores: Sequence[float], labels: Sequence[bool], tau: float) -> float:
    """Mean of the share of correct steps with score >= tau and of incorrect ones below it.

    >>> balanced_accuracy([0.1, 0.5, 0.6, 0.9], [False, True, False, True], 0.55)  # (1/2 + 1/2) / 2
    0.5
    """
    kept = [s >= tau for s in scores]
    good = [k for k, label in zip(kept, labels, strict=True) if label]
    bad = [not k for k, label in zip(kept, labels, strict=True) if not label]
    return (sum(good) / len(good) + sum(bad) / len(bad)) / 2


def best_threshold(scores: Sequence[float], labels: Sequence[bool]) -> Calibration:
    """The threshold with the highest balanced accuracy over the midpoints between consecutive
    distinct scores (balanced, so the share of correct steps in the set does not tilt it); among
    equally good neighbours, the middle one. Scores equal to 6 decimals count as one value, so
    no threshold falls between two float roundings of the same fraction (a token F1 of 1/3).

    >>> best_threshold([0.1, 0.2, 0.6, 0.8], [False, False, True, True]).tau  # midpoint of 0.2, 0.6
    0.4
    """
    if len(scores) != len(labels):
        raise InvalidInputError(f"{len(scores)} scores but {len(labels)} labels")
    if all(labels) or not any(labels):
        raise InvalidInputError("calibration needs both correct and incorrect labelled steps")
    values = sorted({round(s, 6) for s in scores})  # one value for F1s equal up to float rounding
    if len(values) < 2:
        raise InvalidInputError("every step has the same score: no threshold separates them")
    candidates = [(a + b) / 2 for a, b in itertools.pairwise(values)]
    rated = [balanced_accuracy(scores, labels, t) for t in candidates]
    best = max(rated)
    first = next(i for i, r in enumerate(rated) if r >= best - 1e-12)
    last = first
    while last + 1 < len(rated) and rated[last + 1] >= best - 1e-12:
        last += 1
    return Calibration(candidates[(first + last) // 2], best, sum(labels), len(labels) - sum(labels))
