"""Result rows: means per metric, and each registered metric's own aggregation."""

from __future__ import annotations

import pytest

from evidra.core.types import Sample
from evidra.eval.metrics import METRICS
from evidra.eval.sample_scoring import Prediction
from evidra.eval.tables import summarize
from evidra.metrics.mmlongbench import NOT_ANSWERABLE

KEY = {"benchmark": "mmlongbench", "paradigm": "direct", "model": "m"}


def test_an_f1_aggregated_metric_reports_its_answerability_f1() -> None:
    """MMLongBench-Doc's score is registered with aggregation f1: the row gets Acc (the mean) and
    answerability F1. Golds 3 / Paris / not answerable / 5, answers 3 / London / not answerable /
    not answerable: Acc = 2/4; answerable hits 1 of 3 (R = 1/3), 1 of 2 answered (P = 1/2),
    F1 = 2 * 1/3 * 1/2 / (1/3 + 1/2) = 0.4."""
    assert METRICS.get("mmlongbench_score").aggregation == "f1"
    golds = ("3", "Paris", NOT_ANSWERABLE, "5")
    answers = ("3", "London", NOT_ANSWERABLE, NOT_ANSWERABLE)
    scores = (1.0, 0.0, 1.0, 0.0)
    samples = [Sample(f"s{i}", "q?", (g,)) for i, g in enumerate(golds)]
    preds = [
        Prediction(f"s{i}", ("t",), a, scores={"mmlongbench_score": v})
        for i, (a, v) in enumerate(zip(answers, scores, strict=True))
    ]
    row = summarize(KEY, preds, samples)
    assert row.metrics["mmlongbench_score"] == pytest.approx(0.5)
    assert row.metrics["mmlongbench_f1"] == pytest.approx(0.4)
    # a mean-aggregated metric gets no F1 column
    anls = summarize(KEY, [Prediction("s0", ("t",), "3", scores={"anls": 1.0})], samples[:1])
    assert set(anls.metrics) == {"anls"}
