"""From rewards to per-token advantages, for every estimator the trainer supports.

Outcome estimators (``grpo``, ``dr_grpo``) give one value per episode, spread over its policy
tokens. ``rs_grpo`` (EVisRAG Eq. 7-10) group-normalises each reward channel and applies it
only to the tokens of its scopes (``Trajectory.scopes``, channels from
``RewardResult.scopes``). ``turn_credit`` (CAVE) spreads per-turn credits
(``RewardResult.turns``) over each turn's tokens.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from evidra.errors import ConfigError
from evidra.rewards.base import RewardResult
from evidra.rl.advantages import (
    ADVANTAGES,
    rs_grpo_advantages,
    scope_masks_from_spans,
    turn_credit_advantages,
)
from evidra.rl.config import AlgoConfig
from evidra.rl.rollout import Episode


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
    import torch

    length = max(1, max(len(ep.trajectory.token_ids) for ep in episodes))
    if algo.advantage in ("grpo", "dr_grpo"):
        kwargs: dict[str, Any] = {"valid": valid, "singleton": "zero"}
        if algo.advantage == "grpo":
            kwargs["scale_by_std"] = algo.scale_by_std
        seq = ADVANTAGES.get(algo.advantage)(rewards, group_size, **kwargs)  # (N,)
        return seq[:, None].expand(len(episodes), length).clone()  # (N, L)
    policy = torch.zeros(len(episodes), length)  # (N, L)
    for i, ep in enumerate(episodes):
        policy[i, : len(ep.trajectory.policy_mask)] = torch.tensor(
            ep.trajectory.policy_mask, dtype=torch.float32
        )
    if algo.advantage == "rs_grpo":
        if not scope_names:
            raise ConfigError("advantage rs_grpo needs a task with scope names (its reward channels)")
        channel = torch.tensor([[r.scopes.get(n, 0.0) for n in scope_names] for r in results])  # (N, K)
        masks = scope_masks_from_spans(
            [ep.trajectory.scopes for ep in episodes], scope_names, length, policy_mask=policy
        )  # (N, K, L)
        return rs_grpo_advantages(channel, masks, group_size, valid=valid, scale_by_std=algo.scale_by_std,
                                  singleton="zero")  # fmt: skip
    if algo.advantage == "turn_credit":
        t_max = max(1, max(ep.trajectory.num_turns for ep in episodes))
        values = torch.zeros(len(episodes), t_max)  # (N, T)
        present = torch.zeros(len(episodes), t_max)  # (N, T)
        for i, (ep, res) in enumerate(zip(episodes, results, strict=True)):
            turns = list(res.turns)[: ep.trajectory.num_turns]
            values[i, : len(turns)] = torch.tensor(turns, dtype=torch.float32)
            present[i, : ep.trajectory.num_turns] = 1.0
        spans = [ep.trajectory.turns for ep in episodes]
        return turn_credit_advantages(values, present, spans, length, group_size, valid=valid,
                                      scale_by_std=algo.scale_by_std)  # fmt: skip
    raise ConfigError(f"algo.advantage {algo.advantage!r} is not one of grpo, dr_grpo, rs_grpo, turn_credit")
