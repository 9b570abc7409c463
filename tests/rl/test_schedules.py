"""Learning-rate schedules with warmup steps or ratio, and configs checked before the model loads."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.rl.common import make_optimizer
from evidra.rl.run_config import OptimConfig, RLConfig
from evidra.rl.trainer import RLTrainer


def _lrs(cfg: OptimConfig, total: int) -> list[float]:
    model = torch.nn.Linear(2, 2)
    optimizer, scheduler = make_optimizer(model, cfg, total_steps=total)
    out = []
    for _ in range(total):
        out.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return out


def test_constant_linear_and_cosine_with_warmup() -> None:
    # warmup 2 of 6 steps: lr x step/2 first, then (constant) 1 | (linear) (6-s)/4 | (cosine)
    # 0.5(1 + cos(pi (s-2)/4))
    assert _lrs(OptimConfig(lr=1.0, warmup_steps=2), 6) == pytest.approx([0, 0.5, 1, 1, 1, 1])
    assert _lrs(OptimConfig(lr=1.0, warmup_steps=2, schedule="linear"), 6) == pytest.approx(
        [0, 0.5, 1, 0.75, 0.5, 0.25]
    )
    cosine = _lrs(OptimConfig(lr=1.0, warmup_ratio=0.3, schedule="cosine"), 6)  # ceil(1.8) = 2 steps
    assert cosine == pytest.approx([0, 0.5, 1, 0.8535534, 0.5, 0.1464466], abs=1e-6)
    assert _lrs(OptimConfig(lr=0.1), 3) == pytest.approx([0.1, 0.1, 0.1])  # no warmup: constant


def test_trainer_schedule_follows_the_rl_steps(tmp_path: Path) -> None:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp_path}",
        "run.steps=3",
        "run.batch_size=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "data.size=4",
        "data.task=toy.length",
        "optim.lr=0.1",
        "optim.schedule=linear",
        "algo.kl=none",
    ]
    history = RLTrainer(load_config(RLConfig, None, over)).train()
    assert [m["lr"] for m in history] == pytest.approx([0.1 * 2 / 3, 0.1 / 3, 0.0])


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("algo.policy_loss=gpso", "did you mean 'gspo'"),
        ("algo.loss_agg=token_mean", "algo.loss_agg"),
        ("algo.kl_estimator=k4", "algo.kl_estimator"),
        ("algo.advantage=rs-grpo", "algo.advantage"),
        ("data.task=toy.lenght", "data.task"),
        ("run.steps=-1", "run.steps must be >= 0"),
        ("algo.mini_batch_size=3", "must divide run.batch_size=4"),
        ("optim.warmup_ratio=1.5", "warmup_ratio"),
        ("algo.advantage=rs_grpo", "needs a task with scoped rewards"),
        ("model.dtype=float16", "float16 is not supported"),
        ("sft.optim.lr=-1", "lr must be > 0"),
    ],
)
def test_config_errors_come_before_the_model_loads(tmp_path: Path, override: str, message: str) -> None:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp_path}",
        "run.batch_size=4",
        "data.task=toy.length",
        override,
    ]
    if override.startswith("sft."):
        over[-1] = "sft={optim: {lr: -1}}"
    start = time.perf_counter()
    with pytest.raises(ConfigError, match=message):
        RLTrainer(load_config(RLConfig, None, over))
    assert time.perf_counter() - start < 5 and not (tmp_path / "models").exists(), "checked before loading"


def test_gspo_with_dual_clip_is_refused(tmp_path: Path) -> None:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp_path}",
        "algo.policy_loss=gspo",
        "algo.dual_clip=3.0",
    ]
    with pytest.raises(ConfigError, match="gspo has no dual clip"):
        RLTrainer(load_config(RLConfig, None, over))


def test_adamw_is_fused_on_plain_tensors_and_matches_the_default_update() -> None:
    from evidra.rl.common import fused_adamw

    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    twin = torch.nn.Linear(8, 4)
    twin.load_state_dict(model.state_dict())
    optimizer, _ = make_optimizer(model, OptimConfig(lr=0.1))
    assert optimizer.defaults["fused"] is True
    plain = torch.optim.AdamW(twin.parameters(), lr=0.1, betas=(0.9, 0.999), weight_decay=0.0)
    for opt, m in ((optimizer, model), (plain, twin)):
        for _ in range(3):
            opt.zero_grad()
            m(torch.ones(2, 8)).square().sum().backward()
            opt.step()
    assert torch.allclose(model.weight, twin.weight, atol=1e-6)
    # a parameter on no CPU or CUDA device keeps torch's default path
    assert not fused_adamw([torch.nn.Parameter(torch.zeros(2, device="meta"))])
    assert not fused_adamw([])
