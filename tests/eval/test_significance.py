"""Wilson intervals and McNemar's test against hand-computed values."""

from __future__ import annotations

import math

import pytest

from evidra.core.errors import InvalidInputError
from evidra.eval.significance import mcnemar, wilson_interval


def test_wilson_hand_computed() -> None:
    # p = 0.8, n = 10, z = 1.96: denom = 1.38416, centre = (0.8 + 0.19208) / 1.38416 = 0.71675,
    # half = 1.96 * sqrt(0.016 + 0.0096040) / 1.38416 = 0.22653 -> [0.4902, 0.9433]
    i = wilson_interval(8, 10)
    assert i.estimate == 0.8
    assert i.low == pytest.approx(0.4902, abs=1e-4) and i.high == pytest.approx(0.9433, abs=1e-4)
    zero = wilson_interval(0, 20)  # [0, z^2 / (n + z^2)] = [0, 3.8415 / 23.8415]
    assert zero.low == 0.0 and zero.high == pytest.approx(3.841459 / 23.841459, abs=1e-6)
    assert wilson_interval(0, 0).high == 1.0
    with pytest.raises(InvalidInputError):
        wilson_interval(11, 10)


def test_mcnemar_exact_small() -> None:
    # b = 6, c = 4, n = 10: P(X <= 4) = (1 + 10 + 45 + 120 + 210) / 1024 = 386 / 1024; p = 0.75391
    r = mcnemar([True] * 6 + [False] * 4 + [True] * 3, [False] * 6 + [True] * 4 + [True] * 3)
    assert (r.b, r.c, r.exact) == (6, 4, True)
    assert r.p_value == pytest.approx(772 / 1024)
    assert mcnemar([True, False], [True, False]).p_value == 1.0


def test_mcnemar_chi_square_large() -> None:
    # b = 30, c = 10: (|30 - 10| - 1)^2 / 40 = 9.025; p = erfc(sqrt(4.5125)) = 0.002663
    a = [True] * 30 + [False] * 10
    b = [False] * 30 + [True] * 10
    r = mcnemar(a, b)
    assert not r.exact and r.statistic == pytest.approx(9.025)
    assert r.p_value == pytest.approx(math.erfc(math.sqrt(4.5125))) and r.p_value == pytest.approx(
        0.002663, abs=1e-5
    )
    with pytest.raises(InvalidInputError, match="paired"):
        mcnemar([True], [])
