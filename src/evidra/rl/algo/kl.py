"""KL estimators between the policy and a reference policy, and the two places KL can go.

Per-token estimators of KL(π_θ || π_ref) from sampled log-probs (J. Schulman, "Approximating KL
divergence", 2020), named as in verl's ``kl_penalty``:

* ``k1`` (``kl``): ``logp - ref``; ``abs``: ``|logp - ref|``;
* ``k2`` (``mse``): ``0.5·(logp - ref)²``;
* ``k3`` (``low_var_kl``): ``exp(ref - logp) - (ref - logp) - 1``, with ``ref - logp`` clamped
  to ±20 and the result clamped to ±10 (verl). TRL's ``beta`` term is k3 without the clamps.

Placement: *in the loss* (:func:`kl_loss`: aggregated with the policy loss's mode, added as
``coef·kl``; verl ``use_kl_loss``, TRL, EasyR1) or *in the reward* (:func:`kl_in_reward`:
``reward_t = r·1[t = last] - β·kl_t``; verl ``use_kl_in_reward``, OpenRLHF's default).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry
from evidra.rl.algo.losses import aggregate

KL_ESTIMATORS: Registry[Callable[[Tensor, Tensor], Tensor]] = Registry("KL estimator")


@KL_ESTIMATORS.register("k1")
def k1(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """``logp - ref`` (B, L): unbiased, high variance, can be negative (verl ``kl``)."""
    return log_probs - ref_log_probs


@KL_ESTIMATORS.register("abs")
def k1_abs(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """``|logp - ref|`` (B, L) (verl ``abs``)."""
    return (log_probs - ref_log_probs).abs()


@KL_ESTIMATORS.register("k2")
def k2(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """``0.5·(logp - ref)²`` (B, L) (verl ``mse``)."""
    return 0.5 * (log_probs - ref_log_probs).square()


@KL_ESTIMATORS.register("k3")
def k3(log_probs: Tensor, ref_log_probs: Tensor) -> Tensor:
    """``exp(ref - logp) - (ref - logp) - 1`` (B, L), ≥ 0; verl's ``low_var_kl`` clamps
    ``ref - logp`` to ±20 and the result to ±10 for numerical safety."""
    delta = (ref_log_probs - log_probs).clamp(-20.0, 20.0)  # (B, L)
    return (torch.exp(delta) - delta - 1.0).clamp(-10.0, 10.0)


for _alias, _fn in (("kl", k1), ("mse", k2), ("low_var_kl", k3)):
    KL_ESTIMATORS.add(_alias, _fn)


def kl_penalty(log_probs: Tensor, ref_log_probs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token KL estimate (B, L) with the registered ``estimator``."""
    if log_probs.shape != ref_log_probs.shape:
        raise InvalidInputError(
            f"log_probs {tuple(log_probs.shape)} and ref_log_probs {tuple(ref_log_probs.shape)} "
            "differ in shape; pass both as (B, L)"
        )
    return KL_ESTIMATORS.get(estimator)(log_probs.float(), ref_log_probs.float())


def kl_loss(
    log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    *,
    coef: float = 0.001,
    estimator: str = "k3",
    mode: str = "token-mean",
    global_tokens: float | Tensor | None = None,
    global_seqs: float | Tensor | None = None,
    max_len: int | None = None,
) -> Tensor:
    """``coef · aggregate(kl_t, mask, mode)``: the term verl adds with ``use_kl_loss`` (default
    coef 0.001, k3), aggregated exactly like the policy loss so micro-batching stays exact."""
    kld = kl_penalty(log_probs, ref_log_probs, estimator)  # (B, L)
    agg = aggregate(kld, mask, mode, global_tokens=global_tokens, global_seqs=global_seqs, max_len=max_len)
    return coef * agg


def last_token_index(mask: Tensor) -> Tensor:
    """Index of the last masked token of each row, (B, L) -> (B,); -1 for an empty row."""
    m = mask.to(torch.bool)  # (B, L)
    positions = torch.arange(m.shape[-1]).expand_as(m)  # (B, L)
    return torch.where(m, positions, torch.full_like(positions, -1)).max(dim=-1).values


def kl_in_reward(
    scores: Tensor,
    log_probs: Tensor,
    ref_log_probs: Tensor,
    mask: Tensor,
    *,
    beta: float,
    estimator: str = "k1",
    per: Literal["token", "sequence"] = "token",
) -> Tensor:
    """Fold the KL penalty into the reward before the advantage is computed.

    ``per="token"``: token rewards (B, L) with ``reward_t = r·1[t = last masked] - β·kl_t`` on
    masked tokens, 0 elsewhere (verl ``use_kl_in_reward`` with k1 by default, OpenRLHF).
    ``per="sequence"``: (B,) ``r - β·Σ_t kl_t``, what GRPO sees after summing token rewards.
    ``log_probs`` are those of the sampling policy (verl uses ``old_log_probs``).
    """
    if scores.dim() != 1 or scores.shape[0] != log_probs.shape[0]:
        raise InvalidInputError(f"scores must be (B,) = ({log_probs.shape[0]},), got {tuple(scores.shape)}")
    m = mask.to(torch.bool)  # (B, L)
    kld = torch.where(m, kl_penalty(log_probs, ref_log_probs, estimator), torch.zeros(()))  # (B, L)
    if per == "sequence":
        return scores.to(kld.dtype) - beta * kld.sum(-1)  # (B,)
    if per != "token":
        raise InvalidInputError(f"per must be 'token' or 'sequence', got {per!r}")
    last = last_token_index(m)  # (B,)
    if bool((last < 0).any()):
        raise InvalidInputError("a row has an all-zero mask, so it has no last token to carry its reward")
    rewards = -beta * kld  # (B, L)
    rows = torch.arange(rewards.shape[0])
    rewards[rows, last] += scores.to(rewards.dtype)
    return rewards
