from __future__ import annotations

from pathlib import Path

import pytest

from evidra.core.types import Parsed, Sample
from evidra.methods.scoped import LAT_ROUTES, ScopedReward
from evidra.rewards.reward import RewardResult


def test_components_are_routed_to_channels() -> None:
    def base(parsed: Parsed, sample: Sample, trajectory: object = None) -> RewardResult:
        return RewardResult(
            total=2.5, components={"accuracy": 1.0, "step": 0.5, "ground": 1.0, "format": 0.0}
        )

    result = ScopedReward(base, LAT_ROUTES)(Parsed(text=""), Sample(id="s", question="q"))
    assert result.total == 2.5 and dict(result.scopes) == {"answer": 1.0, "reasoning": 1.5}
    unscored = ScopedReward(lambda p, s, t=None: RewardResult.unscored("judge"), LAT_ROUTES)
    assert not unscored(Parsed(text=""), Sample(id="s", question="q")).scored


@pytest.mark.slow
def test_lat_rewards_train_under_rs_grpo_scopes(tmp_path: Path) -> None:
    from evidra.core.config import load_config
    from evidra.methods import rl_trainer
    from evidra.rl.run_config import RLConfig

    cfg = load_config(
        RLConfig,
        None,
        [
            "model.path=tiny:qwen2_5_vl",
            f"run.output_dir={tmp_path}",
            "run.steps=2",
            "run.batch_size=2",
            "rollout.group_size=3",
            "rollout.max_new_tokens=24",
            "method.name=lat",
            "method.scoped=true",
            f"data.path={tmp_path / 'data'}",
            "data.size=4",
            "algo.advantage=rs_grpo",
            "algo.kl=none",
        ],
    )
    trainer = rl_trainer(cfg)
    history = trainer.train()
    assert all("reward/accuracy" in m and m["loss"] == m["loss"] for m in history)
    assert trainer.task.scope_names == ("reasoning", "answer")
