"""RL algorithms as pure tensor functions: advantages, policy losses and their aggregation, KL
estimators, and group filtering. Rollouts and the trainer live in their own modules and are not
imported here, so importing ``evidra.rl`` stays cheap.
"""

from __future__ import annotations

from evidra.rl.algo.advantages import (
    dr_grpo,
    group_ids,
    group_normalize,
    grpo,
    router_advantages,
    rs_grpo_advantages,
    scope_masks_from_spans,
    scoped_token_advantages,
    spans_to_mask,
    turn_credit_advantages,
    turn_masks,
)
from evidra.rl.algo.estimators import ADVANTAGES, AdvantageInputs, Advantages, Estimator
from evidra.rl.algo.filtering import (
    DAPO_FILTER,
    EVISRAG_FILTER,
    DynamicSampler,
    DynamicSamplingError,
    Round,
    SamplingResult,
    all_of,
    filter_groups,
    mean_within,
    std_above,
)
from evidra.rl.algo.kl import KL_ESTIMATORS, kl_in_reward, kl_loss, kl_penalty
from evidra.rl.algo.losses import (
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    PolicyLossOutput,
    active_scope_count,
    aggregate,
    aggregate_scoped,
    batch_counts,
    gspo_loss,
    ppo_clip_loss,
)

__all__ = [
    "ADVANTAGES",
    "DAPO_FILTER",
    "EVISRAG_FILTER",
    "KL_ESTIMATORS",
    "LOSS_AGGREGATIONS",
    "POLICY_LOSSES",
    "AdvantageInputs",
    "Advantages",
    "DynamicSampler",
    "DynamicSamplingError",
    "Estimator",
    "PolicyLossOutput",
    "Round",
    "SamplingResult",
    "active_scope_count",
    "aggregate",
    "aggregate_scoped",
    "all_of",
    "batch_counts",
    "dr_grpo",
    "filter_groups",
    "group_ids",
    "group_normalize",
    "grpo",
    "gspo_loss",
    "kl_in_reward",
    "kl_loss",
    "kl_penalty",
    "mean_within",
    "ppo_clip_loss",
    "router_advantages",
    "rs_grpo_advantages",
    "scope_masks_from_spans",
    "scoped_token_advantages",
    "spans_to_mask",
    "std_above",
    "turn_credit_advantages",
    "turn_masks",
]
