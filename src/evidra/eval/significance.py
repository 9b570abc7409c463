"""Uncertainty of accuracies: Wilson score intervals and McNemar's test between two runs.

Benchmark subsets in these papers are small (a few hundred questions per stratum), so a
reported accuracy carries a binomial interval of several points. Wilson's interval (Wilson,
1927) keeps its coverage near 0 and 1, unlike the normal approximation. McNemar's test compares
two systems on the *same* questions using only the discordant pairs: b (A right, B wrong) and
c (A wrong, B right). With few discordant pairs (b + c < 25) the exact two-sided binomial test
is used, otherwise the chi-square statistic with continuity correction, (|b - c| - 1)^2/(b + c).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError

Z95 = 1.959963984540054  # two-sided 95% normal quantile


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def wilson_interval(successes: float, n: int, z: float = Z95) -> Interval:
    """Wilson score interval for ``successes`` out of ``n`` (fractional successes allowed).

    >>> i = wilson_interval(8, 10)
    >>> round(i.low, 4), round(i.high, 4)
    (0.4902, 0.9433)
    """
    if n < 0 or not 0 <= successes <= max(n, 0):
        raise InvalidInputError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return Interval(0.0, 0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return Interval(p, max(0.0, centre - half), min(1.0, centre + half))


@dataclass(frozen=True)
class McNemar:
    b: int  # A correct, B wrong
    c: int  # A wrong, B correct
    statistic: float  # chi-square with continuity correction (nan when exact)
    p_value: float
    exact: bool


def _binom_two_sided(b: int, n: int) -> float:
    """Exact two-sided p-value of ``min(b, n - b)`` under Binomial(n, 1/2)."""
    k = min(b, n - b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _chi2_sf_1df(x: float) -> float:
    """Survival function of chi-square with one degree of freedom: erfc(sqrt(x / 2))."""
    return math.erfc(math.sqrt(x / 2))


def mcnemar(a_correct: Sequence[bool], b_correct: Sequence[bool], *, exact_below: int = 25) -> McNemar:
    """McNemar's test on paired outcomes of two runs over the same questions.

    >>> r = mcnemar([True] * 6 + [False] * 4, [False] * 6 + [True] * 4)
    >>> r.b, r.c, round(r.p_value, 4)
    (6, 4, 0.7539)
    """
    if len(a_correct) != len(b_correct):
        raise InvalidInputError(
            f"McNemar needs paired outcomes: {len(a_correct)} vs {len(b_correct)} items; "
            "evaluate both runs on the same questions"
        )
    b = sum(1 for x, y in zip(a_correct, b_correct, strict=True) if x and not y)
    c = sum(1 for x, y in zip(a_correct, b_correct, strict=True) if y and not x)
    n = b + c
    if n == 0:
        return McNemar(0, 0, 0.0, 1.0, True)
    if n < exact_below:
        return McNemar(b, c, math.nan, _binom_two_sided(b, n), True)
    stat = (abs(b - c) - 1) ** 2 / n
    return McNemar(b, c, stat, _chi2_sf_1df(stat), False)
