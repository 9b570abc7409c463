"""Ranking metrics: hand-computed values (trec_eval conventions) and VRAG-RL's NDCG variants."""

from __future__ import annotations

import math

import pytest

from evidra.core.errors import InvalidInputError
from evidra.metrics.ranking import (
    hit_rate_at_k,
    mrr_at_k,
    ndcg_at_k,
    precision_at_k,
    recall_at_k,
    vragrl_ndcg,
    vragrl_ndcg_upstream,
)

L2 = math.log2


def test_vragrl_ndcg_paper_vs_upstream_on_duplicates() -> None:
    # retrieved d1, d1 ; gold {d1}. Paper: distinct pages -> DCG = 1, IDCG = 1 -> 1.0.
    assert vragrl_ndcg(["d1", "d1"], ["d1"]) == 1.0
    # Upstream: both copies count: DCG = 1 + 1/log2(3); IDCG = 1 -> 1.6309 (> 1).
    assert vragrl_ndcg_upstream(["d1", "d1"], ["d1"]) == pytest.approx(1 + 1 / L2(3))


def test_vragrl_ndcg_hand_values() -> None:
    # gold {a, b}; retrieved x, a, b: DCG = 1/log2(3) + 1/log2(4); IDCG = 1 + 1/log2(3)
    want = (1 / L2(3) + 0.5) / (1 + 1 / L2(3))
    assert vragrl_ndcg(["x", "a", "b"], ["a", "b"]) == pytest.approx(want)
    assert vragrl_ndcg_upstream(["x", "a", "b"], ["a", "b"]) == pytest.approx(want)
    # only one of two gold retrieved, at rank 1: IDCG still counts both (Eq. 8) -> 1 / (1 + 1/log2 3)
    assert vragrl_ndcg(["a"], ["a", "b"]) == pytest.approx(1 / (1 + 1 / L2(3)))
    assert vragrl_ndcg([], ["a"]) == 0.0
    assert vragrl_ndcg(["a"], []) == 0.0
    assert vragrl_ndcg_upstream([], []) == 0.0


def test_ndcg_graded_trec_conventions() -> None:
    qrels = {"a": 2, "b": 1, "c": 0}  # c is judged non-relevant
    # ranking c, b, a: DCG = 0 + 1/log2 3 + 2/log2 4 = 0.63093 + 1; IDCG = 2 + 1/log2 3
    want = (1 / L2(3) + 1.0) / (2 + 1 / L2(3))
    assert ndcg_at_k(["c", "b", "a"], qrels) == pytest.approx(want)
    # cut at 1: DCG@1 = 0, IDCG@1 = 2
    assert ndcg_at_k(["c", "b", "a"], qrels, k=1) == 0.0
    # cut at 2: DCG = 1/log2 3; IDCG@2 = 2 + 1/log2 3
    assert ndcg_at_k(["c", "b", "a"], qrels, k=2) == pytest.approx((1 / L2(3)) / (2 + 1 / L2(3)))
    assert ndcg_at_k(["a", "b"], qrels) == pytest.approx(1.0)
    assert ndcg_at_k(["a", "a", "b"], qrels) == pytest.approx(1.0)  # a repeated id counts once
    assert ndcg_at_k(["a"], {}) == 0.0


def test_recall_mrr_hit_precision() -> None:
    gold = ["a", "b", "c", "d"]
    ranking = ["x", "a", "y", "b", "c"]
    assert recall_at_k(ranking, gold, k=1) == 0.0
    assert recall_at_k(ranking, gold, k=4) == 0.5
    assert recall_at_k(ranking, gold) == 0.75
    assert mrr_at_k(ranking, gold) == 0.5
    assert mrr_at_k(ranking, gold, k=1) == 0.0
    assert hit_rate_at_k(ranking, gold, k=1) == 0.0
    assert hit_rate_at_k(ranking, gold, k=2) == 1.0
    assert precision_at_k(ranking, gold, k=5) == 0.6
    assert recall_at_k(ranking, {"a": 1, "z": 0}) == 1.0  # rel 0 is not relevant


def test_invalid_cutoff_names_value() -> None:
    with pytest.raises(InvalidInputError, match="got 0"):
        ndcg_at_k(["a"], ["a"], k=0)
