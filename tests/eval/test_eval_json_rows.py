"""Evaluation's JSON inputs (qrels and queries, a run's metrics) read field by field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.eval.retrieval import load_qrels, load_queries


@pytest.mark.parametrize("row", ["[1, 2]", '"q1"', "7"])
def test_a_qrels_line_that_is_no_object_names_its_line(tmp_path: Path, row: str) -> None:
    path = tmp_path / "qrels.jsonl"
    path.write_text(json.dumps({"query-id": "q1", "corpus-id": "a"}) + "\n" + row + "\n")
    with pytest.raises(
        InvalidInputError, match=r"qrels\.jsonl line 2 \(expected JSONL rows .* not a JSON object$"
    ):
        load_qrels(path)
    with pytest.raises(InvalidInputError, match=r"line 2 \(expected .*not a JSON object$"):
        load_queries(path)


@pytest.mark.parametrize("score", [[1], {"v": 1}, None, "high"])
def test_a_relevance_that_is_no_number_is_one_line(tmp_path: Path, score: object) -> None:
    path = tmp_path / "qrels.jsonl"
    path.write_text(json.dumps({"query-id": "q1", "corpus-id": "a", "score": score}) + "\n")
    with pytest.raises(InvalidInputError, match=r"relevance .* of \(q1, a\) is not a number$"):
        load_qrels(path)


def test_a_relevance_may_be_written_as_text_or_a_number(tmp_path: Path) -> None:
    path = tmp_path / "qrels.jsonl"
    rows = [{"query-id": "q1", "corpus-id": "a", "score": "2"}, {"query-id": "q1", "corpus-id": "b"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert load_qrels(path) == {"q1": {"a": 2.0, "b": 1.0}}


def test_a_metric_logged_as_no_number_names_the_key_and_step(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from evidra.eval.plots import plot_training

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": "high"}\n')
    with pytest.raises(InvalidInputError, match=r"metrics\.jsonl: 'loss' at step 2 is 'high', not a number$"):
        plot_training(path, tmp_path / "curves.png", keys=("loss",))
    path.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 0.25}\n{"loss": 9}\n')
    assert plot_training(path, tmp_path / "curves.png", keys=("loss",)).is_file()
