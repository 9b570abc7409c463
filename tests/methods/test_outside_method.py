"""A sixth method from one file outside ``src/`` (``examples/short_answer.py``), found through an
``evidra.methods`` entry point as an installed package's would be, runs through every command:
``train sft``, ``train rl`` and ``eval --method``; eval scores with the reward object training
calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from evidra.cli.main import main
from evidra.methods import METHODS
from evidra.methods.method import _MethodRegistry

ROOT = Path(__file__).resolve().parents[2]
NAME = "short_answer"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``examples/short_answer.py`` importable and announced by a distribution's entry point."""
    site = tmp_path / "site"
    dist = site / "short_answer-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: short-answer\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[evidra.methods]\n{NAME} = short_answer:SHORT_ANSWER\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    METHODS.names()  # the process's registry loaded first, so the one restored after the test is whole
    monkeypatch.setattr(_MethodRegistry, "_loaded", False)  # look the entry points up again
    monkeypatch.setattr(METHODS, "_items", {})  # this test's registry; the process's is kept
    assert NAME in METHODS  # registered by the entry point, nothing imported by hand
    return __import__("short_answer")


def _recipe(tmp_path: Path) -> Path:
    recipe = {
        "method": {"name": NAME, "max_words": 6},
        "model": {"path": "tiny:qwen2_5_vl", "min_pixels": 3136, "max_pixels": 50176},
        "data": {"size": 2, "path": str(tmp_path / "data")},
        "rollout": {"group_size": 2, "max_new_tokens": 8, "max_response_tokens": 24},
        "run": {"output_dir": str(tmp_path / "rl"), "steps": 2, "batch_size": 2, "micro_batch_size": 2},
        "sft": {"run": {"output_dir": str(tmp_path / "sft"), "steps": 2}},
    }
    path = tmp_path / "short_answer.yaml"
    path.write_text(yaml.safe_dump(recipe))
    return path


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
def test_a_method_from_outside_src_trains_and_evaluates(
    installed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    score = installed.ShortAnswerReward.__call__

    def spy(self: Any, parsed: Any, sample: Any, trajectory: Any = None) -> Any:
        calls.append(phase)
        return score(self, parsed, sample, trajectory)

    monkeypatch.setattr(installed.ShortAnswerReward, "__call__", spy)
    recipe = str(_recipe(tmp_path))
    phase = "sft"
    assert main(["-q", "train", "sft", "--config", recipe, "--export", str(tmp_path / "sft-model")]) == 0
    phase = "rl"
    assert main(["-q", "train", "rl", "--config", recipe, f"model.path={tmp_path / 'sft-model'}"]) == 0
    rl = _rows(tmp_path / "rl" / "metrics.jsonl")
    assert [r["step"] for r in rl] == [1, 2] and {"reward/answer", "reward/format"} <= set(rl[0])
    phase = "eval"
    out = tmp_path / "eval"
    argv = [
        "-q",
        "eval",
        "--synthetic",
        "documents",
        "--n",
        "2",
        "--method",
        NAME,
        "--method-option",
        "max_words=6",
        "--model",
        str(tmp_path / "sft-model"),
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    (row,) = _rows(out / "results.jsonl")
    assert row["paradigm"] == "direct[method=short_answer]"
    assert {"reward", "reward/answer", "reward/format"} <= set(row["metrics"])
    assert "rl" in calls and "eval" in calls  # one reward class scored both
    # the eval column is the method's reward of each cached prediction, recomputed here
    task = METHODS.get(NAME).task({"max_words": 6})
    preds = _rows(out / "predictions.jsonl")
    expected = [task.reward(task.parse(p["texts"][-1]), _sample(p, tmp_path), None).total for p in preds]
    assert row["metrics"]["reward"] == pytest.approx(sum(expected) / len(expected))


def _sample(pred: dict[str, Any], tmp_path: Path) -> Any:
    from evidra.eval.benchmarks import synthetic_samples

    samples = synthetic_samples("documents", tmp_path / "eval" / "data", 2, seed=0)
    return next(s for s in samples if s.id == pred["sample_id"])


def test_an_unknown_option_of_the_outside_method_is_one_line(installed: Any) -> None:
    from evidra.core.errors import ConfigError

    with pytest.raises(
        ConfigError,
        match=r"method\.max_word is no option of method 'short_answer'; "
        r"did you mean 'max_words'\?",
    ):
        METHODS.get(NAME).task({"max_word": 3})
