"""PPO mini-batches, recomputed old log-probs, truncated importance sampling, every registered
loss / aggregation / KL estimator through one real update."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.rl.algo.credit import token_advantages
from evidra.rl.algo.kl import KL_ESTIMATORS
from evidra.rl.algo.losses import LOSS_AGGREGATIONS, POLICY_LOSSES
from evidra.rl.run_config import RLConfig
from evidra.rl.trainer import RLTrainer
from evidra.rl.update import UpdateSettings, episode_tensors, policy_update, reference_logprobs
from evidra.rl.validate import local_batch_size


def _cfg(out: Path, *extra: str) -> RLConfig:
    base = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        "run.batch_size=2",
        "run.micro_batch_size=3",
        "rollout.group_size=3",
        "rollout.max_new_tokens=6",
        "optim.lr=1e-3",
        "data.size=8",
        "model.lora.enabled=false",
        "algo.kl=none",
        "data.task=toy.length",
    ]
    return load_config(RLConfig, None, [*base, *extra])


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[RLTrainer, list, torch.Tensor, torch.Tensor]:  # type: ignore[type-arg]
    trainer = RLTrainer(_cfg(tmp_path_factory.mktemp("mb"), "run.steps=1", "algo.kl=loss"))
    groups = trainer._rollout(trainer.next_samples())
    episodes = [ep for eps, _ in groups for ep in eps]
    results = [r for _, rs in groups for r in rs]
    rewards = torch.tensor([r.total for r in results]) + torch.arange(len(episodes)) * 0.1
    valid = torch.ones(len(episodes), dtype=torch.bool)
    advantages = token_advantages(trainer.cfg.algo, episodes, results, rewards, valid, 3)  # (N, L)
    return trainer, episodes, advantages, valid


def _update(
    batch: tuple,
    settings: UpdateSettings,
    *,
    n_mini: int = 1,
    sampler_shift: float = 0.0,
    with_ref: bool = False,
) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    trainer, episodes, advantages, valid = batch
    model = trainer.vlm.model
    start = copy.deepcopy(model.state_dict())
    half = len(episodes) // n_mini
    minis = [
        episode_tensors(trainer.vlm, episodes[i * half : (i + 1) * half], 2, i * half) for i in range(n_mini)
    ]
    for mb in (m for mini in minis for m in mini):
        mb.set_advantages(advantages)
        mb.sampler_logprobs = mb.sampler_logprobs - sampler_shift * mb.loss_mask
    flat = [m for mini in minis for m in mini]
    ref = reference_logprobs(trainer.reference, flat, 1.0) if with_ref else None
    sgd = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=1.0)
    stats = policy_update(model, sgd, trainer.engine, minis, valid, ref, settings)
    after = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    model.load_state_dict(start)
    return stats, {n: after[n] - start[n] for n in after}


def test_one_minibatch_on_policy_equals_the_sampler_ratio_update(batch: tuple) -> None:
    """``auto`` with one optimizer step uses the current log-probs as old: in fp32 the same
    update as taking the sampler's (today's single-step update), up to float noise."""
    auto, d_auto = _update(batch, UpdateSettings(old_logprobs="auto"))
    sampler, d_sampler = _update(batch, UpdateSettings(old_logprobs="sampler"))
    assert auto["optimizer_steps"] == sampler["optimizer_steps"] == 1
    assert auto["loss"] == pytest.approx(sampler["loss"], abs=1e-4)
    for name, delta in d_auto.items():
        scale = float(delta.abs().max().clamp(min=1e-12))
        assert float((delta - d_sampler[name]).abs().max()) / scale < 1e-3, name


def test_minibatches_and_epochs_each_take_an_optimizer_step(batch: tuple) -> None:
    stats, _ = _update(batch, UpdateSettings(old_logprobs="sampler", ppo_epochs=2), n_mini=2)
    assert stats["optimizer_steps"] == 4


def test_truncated_importance_sampling_weights_the_loss(batch: tuple) -> None:
    """Sampler log-probs log(4) below the old ones give weight min(4, cap=2) = 2: twice the loss."""
    plain, _ = _update(batch, UpdateSettings(old_logprobs="sampler"))
    shifted = UpdateSettings(old_logprobs="recompute", tis_cap=2.0)
    # the old log-probs are the sampler's before the shift: old - sampler = log 4
    tis, _ = _update(batch, shifted, sampler_shift=math.log(4.0))
    assert tis["tis/weight_mean"] == pytest.approx(2.0, rel=1e-5)
    assert tis["loss"] == pytest.approx(2.0 * plain["loss"], rel=1e-4)


def test_trainer_recomputes_old_logprobs_with_minibatches(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, "run.steps=1", "run.batch_size=2", "algo.mini_batch_size=1", "algo.ppo_epochs=2")
    (metrics,) = RLTrainer(cfg).train()
    assert metrics["optimizer_steps"] == 4
    # fp32, same weights: the trainer's log-probs equal the sampler's up to float noise
    assert metrics["mismatch/logp_abs_max"] < 1e-3
    assert "mismatch/logp_abs_mean" in metrics


@pytest.mark.parametrize("loss", POLICY_LOSSES.names())
@pytest.mark.parametrize("agg", LOSS_AGGREGATIONS.names())
def test_every_loss_and_aggregation_updates(batch: tuple, loss: str, agg: str) -> None:
    stats, deltas = _update(
        batch,
        UpdateSettings(policy_loss=loss, loss_agg=agg, dual_clip=None, old_logprobs="sampler", max_len=16),
    )
    assert math.isfinite(stats["loss"]) and math.isfinite(stats["grad_norm"])
    assert any(bool(d.abs().sum() > 0) for d in deltas.values()), f"{loss}/{agg} changed nothing"


@pytest.mark.parametrize("estimator", KL_ESTIMATORS.names())
def test_every_kl_estimator_updates(batch: tuple, estimator: str) -> None:
    stats, _ = _update(batch, UpdateSettings(kl_coef=0.1, kl_estimator=estimator), with_ref=True)
    assert math.isfinite(stats["loss"]) and "kl" in stats


def test_global_batch_is_split_over_processes(tmp_path: Path) -> None:
    assert local_batch_size(_cfg(tmp_path, "run.batch_size=8"), 4) == 2
    with pytest.raises(ConfigError, match="divisible by the 3 processes"):
        local_batch_size(_cfg(tmp_path, "run.batch_size=8"), 3)
    with pytest.raises(ConfigError, match="mini_batch_size=2 must be divisible"):
        local_batch_size(_cfg(tmp_path, "run.batch_size=8", "algo.mini_batch_size=2"), 4)
