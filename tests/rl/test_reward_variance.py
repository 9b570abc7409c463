"""A run with nothing to learn from says so: one warning after a few flat steps, and a step whose
groups were all filtered out still logs what was sampled."""

from __future__ import annotations

import logging
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.core.types import Parsed, Sample, Trajectory
from evidra.rewards.reward import RewardResult
from evidra.rl.algo.filtering import NoVarianceWatch, no_variance
from evidra.rl.run_config import RLConfig
from evidra.rl.tasks import TASKS
from evidra.rl.trainer import RLTrainer
from evidra.safeio.sink import read_metrics

WARNING = "no reward variance: nothing to learn from; start from an SFT checkpoint?"
# the schedule follows skipped steps without torch's scheduler-before-optimizer warning
QUIET_SCHEDULE = "error:Detected call of `lr_scheduler.step:UserWarning"
# a random model that never earns the answer: every episode scores -1 (accuracy -1, format 0)
NEVER_RIGHT = RewardResult(-1.0, {"accuracy": -1.0, "format": 0.0})


def _constant_task(name: str, reward: RewardResult) -> str:
    def score(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return reward

    TASKS.add(name, replace(TASKS.get("toy.length"), name=name, reward=score), overwrite=True)
    return name


def _cfg(out: Path, *extra: str) -> RLConfig:
    task = _constant_task("test.never_right", NEVER_RIGHT)
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        "run.batch_size=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=2",
        "data.size=4",
        f"data.task={task}",
        "algo.kl=none",
        "model.lora.enabled=false",
    ]
    return load_config(RLConfig, None, [*over, *extra])


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if WARNING in r.getMessage()]


def test_no_variance_reads_groups_and_skips_unscored_episodes() -> None:
    nan = math.nan
    assert no_variance(torch.tensor([[-1.0, -1.0], [0.5, 0.5]]))  # each group one value
    assert no_variance(torch.tensor([[1.0, nan], [nan, nan]]))  # one scored episode: no spread
    assert not no_variance(torch.tensor([[1.0, 1.0], [0.0, 1.0]]))
    assert not no_variance(torch.tensor([[nan, nan]]))  # nothing scored: a different problem
    watch = NoVarianceWatch(3)
    flat, spread = torch.zeros(2, 2), torch.tensor([[0.0, 1.0]])
    # a step with spread restarts the count; the warning is due once
    observed = [watch.observe(r) for r in (flat, flat, spread, flat, flat, flat, flat)]
    assert observed == [False, False, False, False, False, True, False]
    assert [NoVarianceWatch(0).observe(flat) for _ in range(5)] == [False] * 5


@pytest.mark.filterwarnings(QUIET_SCHEDULE)
def test_a_run_whose_rewards_never_vary_warns_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trainer = RLTrainer(_cfg(tmp_path, "run.steps=4", "algo.warn_no_variance_after=3"))
    seen: list[int] = []
    with caplog.at_level(logging.WARNING, logger="evidra.rl.trainer"):
        history = trainer.train(on_step=lambda step, _: seen.append(len(_warnings(caplog))))
    assert seen == [0, 0, 1, 1]  # after the third flat step, and not again
    (line,) = _warnings(caplog)
    assert "for 3 steps in a row" in line and "e.g. -1" in line and "\n" not in line
    assert all(m["advantage/zero_frac"] == 1.0 and m["reward/accuracy"] == -1.0 for m in history)


def test_a_negative_warning_threshold_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"algo\.warn_no_variance_after must be >= 0"):
        RLTrainer(_cfg(tmp_path, "algo.warn_no_variance_after=-1"))


@pytest.mark.filterwarnings(QUIET_SCHEDULE)
def test_a_step_whose_groups_are_all_filtered_logs_what_it_sampled(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    over = ["run.steps=2", "algo.dynamic_sampling=true", "algo.max_sampling_rounds=2"]
    with caplog.at_level(logging.WARNING, logger="evidra.rl.trainer"):
        RLTrainer(_cfg(tmp_path, *over)).train()
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 2
    for row in rows:  # 2 rounds of 2 groups, all dropped (every reward -1: DAPO's filter)
        assert row["skipped"] == 1.0 and row["sampling/rounds"] == 2.0
        assert (row["sampling/groups"], row["sampling/filtered_groups"]) == (4.0, 4.0)
        assert row["reward/mean"] == -1.0 and row["reward/std"] == 0.0
        assert (row["reward/accuracy"], row["reward/format"]) == (-1.0, 0.0)
        assert row["episode/policy_tokens"] > 0
    skipped = [r.getMessage() for r in caplog.records if "were filtered out" in r.getMessage()]
    assert skipped == [
        f"step {k}: all 4 sampled groups were filtered out; skipping the update" for k in (0, 1)
    ]
