"""Training survives faults: all-unscored steps, non-finite updates, corrupt or torn files."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import CheckpointError, TrainingError
from evidra.core.types import Parsed, Sample, Trajectory
from evidra.rewards.reward import RewardResult
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.checkpoint import WEIGHTS, list_checkpoints, load_trainable_weights, verify_checkpoint
from evidra.rl.tasks import TASKS
from evidra.rl.trainer import RLTrainer
from evidra.safeio.sink import read_metrics

BASE = TASKS.get("toy.length")


def _task(name: str, reward: RewardResult) -> str:
    def score(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return reward

    from dataclasses import replace

    TASKS.add(name, replace(BASE, name=name, reward=score), overwrite=True)
    return name


def _cfg(out: Path, *extra: str) -> RLConfig:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        "run.batch_size=2",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "data.size=4",
        "data.task=toy.length",
        "algo.kl=none",
        "model.lora.enabled=false",
    ]
    return load_config(RLConfig, None, [*over, *extra])


# the schedule follows skipped steps without torch's scheduler-before-optimizer warning
QUIET_SCHEDULE = "error:Detected call of `lr_scheduler.step:UserWarning"


@pytest.mark.filterwarnings(QUIET_SCHEDULE)
def test_a_step_whose_samples_are_all_unscored_is_skipped(tmp_path: Path) -> None:
    task = _task("test.unscored", RewardResult.unscored("judge"))
    trainer = RLTrainer(_cfg(tmp_path, f"data.task={task}", "run.steps=2"))
    before = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}
    history = trainer.train()
    assert [m["update/empty_minibatches"] for m in history] == [1.0, 1.0]
    assert all(m["unscored"] == 4 and m["reward/unscored:judge"] == 4 for m in history)
    assert all(math.isnan(m["reward/mean"]) for m in history)  # no scored episode: no mean, not 0
    after = dict(trainer.vlm.model.named_parameters())
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert [r["reward/mean"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [None, None]


def test_a_non_finite_reward_is_excluded_not_trained_on(tmp_path: Path) -> None:
    task = _task("test.nan", RewardResult(total=float("nan"), components={}))
    (metrics,) = RLTrainer(_cfg(tmp_path, f"data.task={task}", "run.steps=1")).train()
    assert metrics["reward/nonfinite"] == 4 and metrics["update/empty_minibatches"] == 1


@pytest.mark.filterwarnings(QUIET_SCHEDULE)
def test_non_finite_updates_are_skipped_then_stop_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evidra.rl.update as update

    real = update.aggregate
    monkeypatch.setattr(update, "aggregate", lambda *a, **k: real(*a, **k) * float("nan"))  # a NaN loss
    trainer = RLTrainer(_cfg(tmp_path, "run.steps=5", "run.max_bad_steps=2"))
    before = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}
    with pytest.raises(TrainingError, match="2 steps in a row had a non-finite"):
        trainer.train()
    assert trainer.state.step == 2
    for name, param in trainer.vlm.model.named_parameters():
        if param.requires_grad:
            assert torch.equal(param.detach(), before[name]), "a non-finite update must never be applied"


def _corrupt(path: Path) -> None:
    data = bytearray(path.read_bytes())
    for i in range(len(data) // 2, len(data) // 2 + 50):
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_corrupt_newest_checkpoint_is_named_and_the_previous_one_used(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    RLTrainer(_cfg(tmp_path, "run.steps=4", "run.save_every=2", "run.keep_checkpoints=3")).train()
    newest = list_checkpoints(tmp_path)[-1]
    _corrupt(newest / "trainer.pt")
    with pytest.raises(CheckpointError, match=r"trainer\.pt is missing or corrupt"):
        verify_checkpoint(newest)
    with caplog.at_level("WARNING"):
        resumed = RLTrainer(_cfg(tmp_path, "run.steps=4", "run.save_every=2"))
    assert resumed.state.step == 2 and "step-000004" in caplog.text
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]


def test_non_finite_weights_and_negative_positions_are_refused(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    RLTrainer(_cfg(tmp_path, "run.steps=2", "run.save_every=1", "run.keep_checkpoints=3")).train()
    first, second = list_checkpoints(tmp_path)
    weights = load_trainable_weights(second)
    name = next(iter(weights))
    weights[name][0] = float("nan")
    save_file(weights, str(second / WEIGHTS))
    (second / "checksums.json").unlink()  # a forged checkpoint with no checksums still gets checked
    (first / "checksums.json").unlink()
    (first / "state.json").write_text(json.dumps({"step": -5, "data_epoch": 0, "data_offset": 0}))
    trainer = RLTrainer(_cfg(tmp_path, "run.steps=2"))
    assert trainer.state.step == 0  # neither is usable: a clean start, not a crash


def test_checkpoints_of_another_shape_or_with_missing_weights_are_named(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    from evidra.rl.runs.checkpoint import load_checkpoint

    trainer = RLTrainer(_cfg(tmp_path, "run.steps=1"))
    trainer.train()
    (ckpt,) = list_checkpoints(tmp_path)
    weights = load_trainable_weights(ckpt)
    name = next(iter(weights))
    (ckpt / "checksums.json").unlink()  # forged files: the loader itself must catch them
    model, opt, sched = trainer.engine.unwrap(trainer.model), trainer.optimizer, trainer.scheduler
    save_file({**weights, name: weights[name][:1].contiguous()}, str(ckpt / WEIGHTS))
    with pytest.raises(CheckpointError, match="has shape"):
        load_checkpoint(ckpt, model, opt, sched)
    save_file({k: v for k, v in weights.items() if k != name}, str(ckpt / WEIGHTS))
    with pytest.raises(CheckpointError, match="lacks trained weights"):
        load_checkpoint(ckpt, model, opt, sched)
    save_file(weights, str(ckpt / WEIGHTS))
    state = torch.load(ckpt / "trainer.pt", weights_only=True)
    state["optimizer"]["param_groups"][0]["params"] = [0]  # an optimizer state of another model
    torch.save(state, ckpt / "trainer.pt")
    with pytest.raises(CheckpointError, match="does not fit this run"):
        load_checkpoint(ckpt, model, opt, sched)


def test_a_run_killed_before_its_first_checkpoint_restarts_clean(tmp_path: Path) -> None:
    metrics = tmp_path / "metrics.jsonl"
    tmp_path.mkdir(exist_ok=True)
    metrics.write_text('{"step": 1, "loss": 0.5}\n{"step": 2, "lo')  # a killed attempt, torn last line
    history = RLTrainer(_cfg(tmp_path, "run.steps=1")).train()
    assert [r["step"] for r in read_metrics(metrics)] == [1] and len(history) == 1
    assert read_metrics(metrics)[0]["loss"] == pytest.approx(history[0]["loss"])
