from __future__ import annotations

import math
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import ConfigError, MissingDependencyError
from evidra.safeio.sink import MetricsSink, check_report_to, read_metrics


def test_jsonl_sink_writes_truncates_and_cleans(tmp_path: Path) -> None:
    sink = MetricsSink(tmp_path)
    for step in (1, 2, 3):
        sink.write(step, {"loss": 0.5 * step, "bad": math.nan})
    sink.truncate_after(2)  # a resumed run from step 2 drops the stale record of step 3
    records = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in records] == [1, 2] and records[1] == {"step": 2, "loss": 1.0, "bad": None}
    assert not MetricsSink(tmp_path / "other", enabled=False).path.parent.exists()


def fake_wandb(logged: list[Any]) -> types.SimpleNamespace:
    class Run:
        def log(self, data: dict[str, float], step: int) -> None:
            logged.append((step, data))

        def finish(self) -> None:
            logged.append("finished")

    def init(**kwargs: Any) -> Run:
        logged.append(("init", kwargs["project"], kwargs["config"]))
        return Run()

    return types.SimpleNamespace(init=init)


def fake_tensorboard(logged: list[Any]) -> types.ModuleType:
    class SummaryWriter:
        def __init__(self, log_dir: str) -> None:
            logged.append(("tb", Path(log_dir).name))

        def add_scalar(self, key: str, value: float, step: int) -> None:
            logged.append((step, key, value))

        def close(self) -> None:
            logged.append("tb closed")

    module = types.ModuleType("torch.utils.tensorboard")
    module.SummaryWriter = SummaryWriter  # type: ignore[attr-defined]
    return module


def test_wandb_sink_logs_through_the_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logged: list[Any] = []
    monkeypatch.setitem(sys.modules, "wandb", fake_wandb(logged))
    sink = MetricsSink(tmp_path, report_to=["jsonl", "wandb"], wandb_project="evidra-test", config={"a": 1})
    sink.write(7, {"reward/mean": 0.25, "kl": math.inf})
    sink.close()
    assert logged == [("init", "evidra-test", {"a": 1}), (7, {"reward/mean": 0.25}), "finished"]
    assert read_metrics(tmp_path / "metrics.jsonl") == [{"step": 7, "reward/mean": 0.25, "kl": None}]
    logged.clear()
    MetricsSink(tmp_path, report_to=["wandb"])  # no project named: evidra's
    assert logged == [("init", "evidra", {})]


def test_tensorboard_sink_writes_scalars_under_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logged: list[Any] = []
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake_tensorboard(logged))
    sink = MetricsSink(tmp_path, report_to=["jsonl", "tensorboard", "tensorboard"])  # named twice: once
    sink.write(3, {"loss": 0.5, "bad": math.nan})
    sink.close()
    assert logged == [("tb", "tensorboard"), (3, "loss", 0.5), "tb closed"]


def test_a_missing_library_is_one_line_naming_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # not installed
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    for name in ("wandb", "tensorboard"):
        with pytest.raises(MissingDependencyError) as info:
            check_report_to(["jsonl", name])
        message = str(info.value)
        assert "\n" not in message and f"pip install 'evidra[{name}]'" in message
        assert f"run.report_to names {name}" in message
    check_report_to(["jsonl"])  # the JSONL file needs nothing
    with pytest.raises(ConfigError, match=r"did you mean 'wandb'"):
        check_report_to(["wandbb"])
