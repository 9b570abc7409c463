from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from evidra.errors import MissingDependencyError
from evidra.sink import MetricsSink, read_metrics


def test_jsonl_sink_writes_truncates_and_cleans(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path)
    for step in (1, 2, 3):
        sink.write(step, {"loss": 0.5 * step, "bad": math.nan})
    sink.truncate_after(2)  # a resumed run from step 2 drops the stale record of step 3
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2] and records[1] == {"step": 2, "loss": 1.0, "bad": None}
    assert not MetricsSink(tmp_path / "other", enabled=False).path.parent.exists()


def test_wandb_sink_logs_through_the_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[Any] = []

    class Run:
        def log(self, data: dict[str, float], step: int) -> None:
            logged.append((step, data))

        def finish(self) -> None:
            logged.append("finished")

    fake = types.SimpleNamespace(init=lambda **kwargs: Run())
    monkeypatch.setitem(sys.modules, "wandb", fake)
    sink = MetricsSink(tmp_path, wandb_project="evidra-test", config={"a": 1})
    sink.write(7, {"reward/mean": 0.25, "kl": math.inf})
    sink.close()
    assert logged == [(7, {"reward/mean": 0.25}), "finished"]
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    with pytest.raises(MissingDependencyError, match=r"evidra\[wandb\]"):
        MetricsSink(tmp_path, wandb_project="x")
