"""From episodes and their rewards to per-token advantages, for every estimator in ``ADVANTAGES``.

``advantage_inputs`` turns a batch of episodes into the one record every estimator takes
(``estimators.AdvantageInputs``): scalar rewards, the reward channels on their token scopes
(``Trajectory.scopes``, channels from ``RewardResult.scopes``) when the task names scopes, and the
per-turn credits (``RewardResult.turns``) on each turn's tokens. ``token_advantages`` looks the
configured estimator up by name and spreads its result over the tokens: no estimator is named
here, so a new one is a new registered function in ``estimators``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from evidra.rewards.base import RewardResult
from evidra.rl.advantages import ScopedAdvantages, scope_masks_from_spans
from evidra.rl.config import AlgoConfig
from evidra.rl.estimators import ADVANTAGES, AdvantageInputs
from evidra.rollout import Episode

if TYPE_CHECKING:
    from torch import Tensor


def _policy_mask(episodes: Sequence[Episode], length: int) -> Any:
    import torch

    policy = torch.zeros(len(episodes), length)  # (N, L)
    for i, ep in enumerate(episodes):
        mask = ep.trajectory.policy_mask
        policy[i, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
    return policy


def _turn_credits(episodes: Sequence[Episode], results: Sequence[RewardResult]) -> tuple[Any, Any]:
    """Per-turn credits ``(N, T)`` (``RewardResult.turns``, 0 where a reward gives none) and a mask
    ``(N, T)`` of the turns each episode has."""
    import torch

    n = len(episodes)
    t_max = max(1, max(ep.trajectory.num_turns for ep in episodes))
    values = torch.zeros(n, t_max)  # (N, T)
    present = torch.zeros(n, t_max)  # (N, T)
    for i, (ep, res) in enumerate(zip(episodes, results, strict=True)):
        turns = list(res.turns)[: ep.trajectory.num_turns]
        values[i, : len(turns)] = torch.tensor(turns, dtype=torch.float32)
        present[i, : ep.trajectory.num_turns] = 1.0
    return values, present


def advantage_inputs(
    algo: AlgoConfig,
    episodes: Sequence[Episode],
    results: Sequence[RewardResult],
    rewards: Any,
    valid: Any,
    group_size: int,
    scope_names: Sequence[str] = (),
) -> AdvantageInputs:
    """The estimators' input record for a batch; a group with one valid episode gets advantage 0."""
    import torch

    length = max(1, max(len(ep.trajectory.token_ids) for ep in episodes))
    channels = masks = None
    if scope_names:
        channels = torch.tensor([[r.scopes.get(n, 0.0) for n in scope_names] for r in results])  # (N, K)
        masks = scope_masks_from_spans(
            [ep.trajectory.scopes for ep in episodes],
            scope_names,
            length,
            policy_mask=_policy_mask(episodes, length),
        )  # (N, K, L)  fmt: skip
    credits, present = _turn_credits(episodes, results)  # (N, T), (N, T)
    return AdvantageInputs(
        rewards,
        group_size,
        valid=valid,
        scale_by_std=algo.scale_by_std,
        eps=algo.eps,
        singleton="zero",
        length=length,
        scope_rewards=channels,
        scope_masks=masks,
        turn_credits=credits,
        turn_mask=present,
        turn_spans=[ep.trajectory.turns for ep in episodes],
    )


def token_advantages(
    algo: AlgoConfig,
    episodes: Sequence[Episode],
    results: Sequence[RewardResult],
    rewards: Any,
    valid: Any,
    group_size: int,
    scope_names: Sequence[str] = (),
) -> Tensor | ScopedAdvantages:
    """Advantages ``(N, L)``: row i covers episode i's tokens (0 past its end); ``ScopedAdvantages``
    ``(N, K, L)`` for an estimator whose loss is taken per scope (``router``)."""
    inputs = advantage_inputs(algo, episodes, results, rewards, valid, group_size, scope_names)
    return ADVANTAGES.get(algo.advantage).fn(inputs).to_tokens(inputs.length)
