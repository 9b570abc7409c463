"""Under a launcher only rank 0 prints; the other ranks write to their logs, and every error is one
whole line prefixed with its rank (the two-process run itself: tests/rl/test_distributed.py)."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.errors import ConfigError


class FakeTrainer:
    """What ``evidra train rl`` uses of a trainer; it logs, warns and prints while it trains."""

    def __init__(self, cfg: Any, fail: Exception | None, rank: int) -> None:
        self.cfg, self.fail = cfg, fail
        self.state = SimpleNamespace(step=0)
        self.out = Path(cfg.run.output_dir)
        self.sink = SimpleNamespace(path=self.out / "metrics.jsonl")
        self.engine = SimpleNamespace(is_main_process=rank == 0)

    def train(self, on_step: Any) -> None:
        logging.getLogger("evidra.rl.trainer").warning("step 1: a warning of this rank")
        warnings.warn("a library's warning", UserWarning, stacklevel=1)
        print("printed by a library")
        on_step(1, {"loss": 0.5})
        if self.fail is not None:
            raise self.fail


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rank: int, fail: Exception | None = None) -> int:
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr("evidra.methods.rl_trainer", lambda cfg: FakeTrainer(cfg, fail, rank))
    return main(["train", "rl", f"run.output_dir={tmp_path}", "run.steps=1"])


def test_another_rank_prints_nothing_and_logs_to_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    handlers = logging.getLogger().handlers[:]
    assert _run(tmp_path, monkeypatch, rank=1) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == ""  # no bar, no metrics line, no log line
    log = (tmp_path / "logs" / "rank-1.log").read_text()
    for said in (
        "WARNING evidra.rl.trainer: step 1: a warning of this rank",
        "a library's warning",
        "printed by a library",
    ):
        assert said in log, log
    assert logging.getLogger().handlers == handlers  # the routing ends with the command


def test_rank_0_prints_its_bar_and_the_metrics_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, monkeypatch, rank=0) == 0
    out, err = capsys.readouterr()
    assert f"metrics: {tmp_path / 'metrics.jsonl'}" in out and "printed by a library" in out
    assert "train rl: 1/1 steps (100%)" in err  # the bar (stderr is not a terminal: a plain line)
    assert not (tmp_path / "logs").exists()


@pytest.mark.parametrize("rank", [0, 1])
def test_an_error_is_one_whole_line_with_its_rank(
    rank: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _run(tmp_path, monkeypatch, rank, ConfigError("run.batch_size=3 must divide by 2"))
    lines = capsys.readouterr().err.splitlines()
    assert code == 2
    assert f"[rank {rank}] evidra train rl: error: run.batch_size=3 must divide by 2" in lines
    assert not any("[rank" in line and not line.startswith("[rank") for line in lines)  # never glued
    if rank:
        assert "run.batch_size=3 must divide by 2" in (tmp_path / "logs" / "rank-1.log").read_text()


def test_a_bug_on_another_rank_is_one_line_and_its_traceback_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _run(tmp_path, monkeypatch, 1, RuntimeError("boom\nsecond line")) == 1
    log = tmp_path / "logs" / "rank-1.log"
    assert capsys.readouterr().err == f"[rank 1] evidra train rl: RuntimeError: boom (traceback in {log})\n"
    assert "Traceback (most recent call last)" in log.read_text()
    with pytest.raises(RuntimeError, match="boom"):  # rank 0 shows a bug's traceback as always
        _run(tmp_path, monkeypatch, 0, RuntimeError("boom"))


def test_a_lone_process_prints_errors_without_a_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert main(["train", "rl", "run.steps=-1", f"run.output_dir={tmp_path}"]) == 2
    assert capsys.readouterr().err.startswith("evidra train rl: error: run.steps must be >= 0")
