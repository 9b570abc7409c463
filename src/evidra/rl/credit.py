"""From rewards to per-token advantages, for every estimator the trainer supports.

Each estimator is registered in ``CREDIT`` under its ``algo.advantage`` name and takes one
``CreditInputs`` record. Outcome estimators (``grpo``, ``dr_grpo``) give one value per episode,
spread over its policy tokens. ``rs_grpo`` (EVisRAG Eq. 7-10) group-normalises each reward
channel and applies it only to the tokens of its scopes (``Trajectory.scopes``, channels from
``RewardResult.scopes``). ``turn_credit`` (CAVE) spreads per-turn credits (``RewardResult.turns``)
over each turn's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from evidra.errors import ConfigError
from evidra.registry import Registry
from evidra.rewards.base import RewardResult
from evidra.rl.advantages import (
    ADVANTAGES,
    rs_grpo_advantages,
    scope_masks_from_spans,
    turn_credit_advantages,
)
from evidra.rl.config import AlgoConfig
from evidra.rollout import Episode


@dataclass(frozen=True, eq=False)
class CreditInputs:
    algo: AlgoConfig
    episodes: Sequence[Episode]
    results: Sequence[RewardResult]
    rewards: Any  # (N,) scalar rewards (KL-shaped when the KL goes into the reward)
    valid: Any  # (N,) bool: scored episodes
    group_size: int
    scope_names: Sequence[str] = ()

    @property
    def length(self) -> int:
        return max(1, max(len(ep.trajectory.token_ids) for ep in self.episodes))

    def policy_mask(self) -> Any:
        import torch

        policy = torch.zeros(len(self.episodes), self.length)  # (N, L)
        for i, ep in enumerate(self.episodes):
            mask = ep.trajectory.policy_mask
            policy[i, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
        return policy


class CreditFn(Protocol):
    def __call__(self, inputs: CreditInputs) -> Any: ...  # (N, L)


CREDIT: Registry[CreditFn] = Registry("advantage estimator")


def _outcome(inputs: CreditInputs, **kwargs: Any) -> Any:
    seq = ADVANTAGES.get(inputs.algo.advantage)(
        inputs.rewards, inputs.group_size, valid=inputs.valid, singleton="zero", **kwargs
    )  # (N,)
    return seq[:, None].expand(len(inputs.episodes), inputs.length).clone()  # (N, L)


@CREDIT.register("grpo")
def grpo_credit(inputs: CreditInputs) -> Any:
    return _outcome(inputs, scale_by_std=inputs.algo.scale_by_std, eps=inputs.algo.eps)


@CREDIT.register("dr_grpo")
def dr_grpo_credit(inputs: CreditInputs) -> Any:
    return _outcome(inputs)


@CREDIT.register("rs_grpo")
def rs_grpo_credit(inputs: CreditInputs) -> Any:
    import torch

    names = inputs.scope_names
    if not names:
        raise ConfigError("advantage rs_grpo needs a task with scope names (its reward channels)")
    channel = torch.tensor([[r.scopes.get(n, 0.0) for n in names] for r in inputs.results])  # (N, K)
    masks = scope_masks_from_spans(
        [ep.trajectory.scopes for ep in inputs.episodes],
        names,
        inputs.length,
        policy_mask=inputs.policy_mask(),
    )  # (N, K, L)
    return rs_grpo_advantages(channel, masks, inputs.group_size, valid=inputs.valid,
                              scale_by_std=inputs.algo.scale_by_std, eps=inputs.algo.eps,
                              singleton="zero")  # fmt: skip


@CREDIT.register("turn_credit")
def turn_credit(inputs: CreditInputs) -> Any:
    import torch

    episodes, n = inputs.episodes, len(inputs.episodes)
    t_max = max(1, max(ep.trajectory.num_turns for ep in episodes))
    values = torch.zeros(n, t_max)  # (N, T)
    present = torch.zeros(n, t_max)  # (N, T)
    for i, (ep, res) in enumerate(zip(episodes, inputs.results, strict=True)):
        turns = list(res.turns)[: ep.trajectory.num_turns]
        values[i, : len(turns)] = torch.tensor(turns, dtype=torch.float32)
        present[i, : ep.trajectory.num_turns] = 1.0
    spans = [ep.trajectory.turns for ep in episodes]
    a = inputs.algo
    return turn_credit_advantages(values, present, spans, inputs.length, inputs.group_size,
                                  valid=inputs.valid, scale_by_std=a.scale_by_std, eps=a.eps)  # fmt: skip


def token_advantages(
    algo: AlgoConfig,
    episodes: Sequence[Episode],
    results: Sequence[RewardResult],
    rewards: Any,
    valid: Any,
    group_size: int,
    scope_names: Sequence[str] = (),
) -> Any:
    """Advantages ``(N, L)``: row i covers episode i's tokens (0 past its end)."""
    inputs = CreditInputs(algo, episodes, results, rewards, valid, group_size, scope_names)
    return CREDIT.get(algo.advantage)(inputs)
