"""One training step with SPO and over-turn masking on the tiny model: the trainer honours both."""

from __future__ import annotations

from pathlib import Path

from evidra.core.config import load_config
from evidra.rl.run_config import RLConfig
from evidra.rl.trainer import RLTrainer


def _cfg(out: Path, *extra: str) -> RLConfig:
    base = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        "run.batch_size=1",
        "run.micro_batch_size=3",
        "rollout.group_size=3",
        "rollout.max_new_tokens=6",
        "data.task=toy.key_value",
        "rollout.max_turns=2",
        "algo.kl=none",
        "run.steps=1",
        "data.size=4",
    ]
    return load_config(RLConfig, None, [*base, *extra])


def test_spo_and_over_turn_masking_in_a_training_step(tmp_path: Path) -> None:
    # the untrained tiny model never answers: every episode ends at the turn cap (truncated), so the
    # switch masks all three and no optimizer step is taken; without it the same batch is stepped on
    (masked,) = RLTrainer(_cfg(tmp_path / "on", "algo.advantage=spo", "algo.mask_truncated=true")).train()
    assert masked["episode/truncated"] == 1.0 and masked["episode/over_turn_masked"] == 3.0
    assert masked["update/empty_minibatches"] == 1.0 and masked["optimizer_steps"] == 0.0
    (plain,) = RLTrainer(_cfg(tmp_path / "off", "algo.advantage=spo")).train()
    assert plain["episode/truncated"] == 1.0 and "episode/over_turn_masked" not in plain
    assert plain["optimizer_steps"] == 1.0
