"""Policy losses (PPO clip with DAPO clip-higher and dual clip, GSPO) and loss aggregation.

A policy loss returns the *per-token* loss (B, L) and its statistics; an aggregation mode turns
it into the scalar to back-propagate. Every aggregation takes optional *global* normalisers
(token / sequence counts over the whole mini-batch), so that summing the aggregated losses of
the micro-batches equals the loss of the full batch, as verl's ``agg_loss`` with
``global_batch_info`` does. Without them the counts of the tensor given are used.

Run the tests with ``OMP_NUM_THREADS=1 .venv/bin/pytest tests/rl/test_losses.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry


@dataclass(frozen=True)
class PolicyLossOutput:
    """Per-token loss (0 outside the mask) and detached scalar statistics over masked tokens."""

    loss: Tensor  # (B, L)
    clip_frac_low: Tensor  # ()  A < 0 and ratio < 1 - clip_low
    clip_frac_high: Tensor  # ()  A > 0 and ratio > 1 + clip_high
    dual_clip_frac: Tensor  # ()  A < 0 and ratio > dual_clip
    approx_kl: Tensor  # ()  mean of old_logp - logp, verl's ``ppo_kl``


class PolicyLoss(Protocol):
    """What every registered policy loss accepts: mypy rejects a variant whose signature drifts."""

    def __call__(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        advantages: Tensor,
        mask: Tensor,
        *,
        clip_low: float = ...,
        clip_high: float = ...,
        dual_clip: float | None = ...,
    ) -> PolicyLossOutput: ...


class LossAggregation(Protocol):
    """What every registered loss aggregation accepts (global normalisers may be None)."""

    def __call__(
        self,
        loss: Tensor,
        mask: Tensor,
        *,
        global_tokens: float | Tensor | None = ...,
        global_seqs: float | Tensor | None = ...,
        max_len: int | None = ...,
    ) -> Tensor: ...


POLICY_LOSSES: Registry[PolicyLoss] = Registry("policy loss")
LOSS_AGGREGATIONS: Registry[LossAggregation] = Registry("loss aggregation")


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    v, m = torch.broadcast_tensors(values, mask.to(values.dtype))  # (B, L)
    return ((v * m).sum() / m.sum().clamp(min=1.0)).detach()


def _broadcast_advantages(advantages: Tensor, log_probs: Tensor) -> Tensor:
    """(B,) sequence advantages become (B, 1); (B, L) token advantages pass through."""
    if advantages.dim() == log_probs.dim() - 1:
        return advantages.unsqueeze(-1)
    if advantages.dim() != log_probs.dim():
        raise InvalidInputError(
            f"advantages of shape {tuple(advantages.shape)} do not fit log-probs "
            f"{tuple(log_probs.shape)}; give (B,) or (B, L)"
        )
    return advantages


@POLICY_LOSSES.register("ppo_clip")
def ppo_clip_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = 3.0,
    log_ratio_clamp: float = 20.0,
) -> PolicyLossOutput:
    """PPO clipped surrogate, per token, as verl's ``compute_policy_loss_vanilla``.

    ``ratio = exp(clamp(logp - old_logp, ±20))``; ``max(-A·r, -A·clip(r, 1-clip_low, 1+clip_high))``
    (DAPO clip-higher: e.g. clip_high=0.28); where ``A < 0`` the loss is further capped at
    ``-A·dual_clip`` (dual-clip PPO, c=3; ``None`` disables it, as TRL has none). Shapes only
    need to broadcast, so (B, 1, L) log-probs with (B, K, 1) advantages and (B, K, L) masks give
    the per-scope losses of EVisRAG's router.
    """
    if dual_clip is not None and dual_clip <= 1.0:
        raise InvalidInputError(f"dual_clip must be > 1 (verl uses 3.0), got {dual_clip}; or pass None")
    adv = _broadcast_advantages(advantages, log_probs)  # (B, L)
    log_ratio = (log_probs - old_log_probs).clamp(-log_ratio_clamp, log_ratio_clamp)  # (B, L)
    ratio = torch.exp(log_ratio)  # (B, L)
    unclipped = -adv * ratio  # (B, L)
    clipped = torch.maximum(unclipped, -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))  # (B, L)
    loss, dual_hit = clipped, torch.zeros_like(clipped, dtype=torch.bool)
    if dual_clip is not None:
        cap = -adv * dual_clip  # (B, L)
        loss = torch.where(adv < 0, torch.minimum(clipped, cap), clipped)  # (B, L)
        dual_hit = (adv < 0) & (clipped > cap)
    m = mask.to(torch.bool)  # (B, L)
    return PolicyLossOutput(
        loss=torch.where(m, loss, torch.zeros_like(loss)),
        clip_frac_low=_masked_mean(((adv < 0) & (ratio < 1.0 - clip_low)).float(), m),
        clip_frac_high=_masked_mean(((adv > 0) & (ratio > 1.0 + clip_high)).float(), m),
        dual_clip_frac=_masked_mean(dual_hit.float(), m),
        approx_kl=_masked_mean(-log_ratio, m),
    )


@POLICY_LOSSES.register("gspo")
def gspo_loss(
    log_probs: Tensor,
    old_log_probs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    clip_low: float = 3e-4,
    clip_high: float = 4e-4,
    dual_clip: float | None = None,
    log_ratio_clamp: float = 10.0,
) -> PolicyLossOutput:
    """GSPO (sequence-level importance ratio), in verl's token-combined form.

    ``s_i = exp(mean_t(logp - old_logp))`` over the masked tokens; the per-token ratio is
    ``exp(logp - sg(logp) + sg(log s_i))`` (clamped at ``log_ratio_clamp`` = 10 as verl), so its
    value is ``s_i`` and its gradient is ``s_i·∇logp_t``; then the clipped surrogate with the
    GSPO paper's clip range (3e-4, 4e-4). GSPO has no dual clip: ``dual_clip`` must be None.
    verl always aggregates GSPO with ``seq-mean-token-mean``.
    """
    if dual_clip is not None:
        raise InvalidInputError(f"gspo has no dual clip; set algo.dual_clip to null (got {dual_clip})")
    adv = _broadcast_advantages(advantages, log_probs)  # (B, L)
    log_ratio, m = torch.broadcast_tensors(log_probs - old_log_probs, mask.to(log_probs.dtype))  # (B, L)
    seq_log_ratio = (log_ratio * m).sum(-1) / m.sum(-1).clamp(min=1.0)  # (B,)
    log_seq = log_probs - log_probs.detach() + seq_log_ratio.detach().unsqueeze(-1)  # (B, L)
    ratio = torch.exp(log_seq.clamp(max=log_ratio_clamp))  # (B, L)
    unclipped = -adv * ratio  # (B, L)
    loss = torch.maximum(unclipped, -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high))  # (B, L)
    mb = m.to(torch.bool)
    return PolicyLossOutput(
        loss=torch.where(mb, loss, torch.zeros_like(loss)),
        clip_frac_low=_masked_mean(((adv < 0) & (ratio < 1.0 - clip_low)).float(), mb),
        clip_frac_high=_masked_mean(((adv > 0) & (ratio > 1.0 + clip_high)).float(), mb),
        dual_clip_frac=torch.zeros(()),
        approx_kl=_masked_mean(-log_ratio.detach(), mb),
    )


def _masked_sums(loss: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sequence masked loss sums and token counts, both (B,)."""
    if loss.shape != mask.shape:
        raise InvalidInputError(f"loss {tuple(loss.shape)} and mask {tuple(mask.shape)} must have one shape")
    m = mask.to(torch.bool)  # (B, L)
    sums = torch.where(m, loss, torch.zeros_like(loss)).sum(-1)  # (B,)
    return sums, m.sum(-1).to(loss.dtype)


def _count(given: float | int | Tensor | None, local: Tensor, name: str) -> Tensor:
    """The global count when given (must be > 0), else the local count (at least 1)."""
    if given is None:
        return local.clamp(min=1.0)
    value = torch.as_tensor(given, dtype=local.dtype)
    if value <= 0:
        raise InvalidInputError(f"{name} must be > 0, got {given}; pass None to use this batch's count")
    return value


@LOSS_AGGREGATIONS.register("token-mean")
def token_mean(
    loss: Tensor, mask: Tensor, *, global_tokens: float | Tensor | None = None, **_: object
) -> Tensor:
    """``Σ L·M / N_tokens`` (DAPO, verl default, TRL ``dapo``/``bnpo``; EVisRAG Eq. 10)."""
    sums, lengths = _masked_sums(loss, mask)  # (B,), (B,)
    return sums.sum() / _count(global_tokens, lengths.sum(), "global_tokens")


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(
    loss: Tensor, mask: Tensor, *, global_seqs: float | Tensor | None = None, **_: object
) -> Tensor:
    """``Σ_i (Σ_t L·M / n_i) / N_seqs`` (original GRPO; TRL ``grpo``)."""
    sums, lengths = _masked_sums(loss, mask)  # (B,), (B,)
    per_seq = sums / lengths.clamp(min=1.0)  # (B,)
    return per_seq.sum() / _count(global_seqs, (lengths > 0).sum().to(loss.dtype), "global_seqs")


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(
    loss: Tensor, mask: Tensor, *, global_seqs: float | Tensor | None = None, **_: object
) -> Tensor:
    """``Σ_i Σ_t L·M / N_seqs``."""
    sums, lengths = _masked_sums(loss, mask)  # (B,), (B,)
    return sums.sum() / _count(global_seqs, (lengths > 0).sum().to(loss.dtype), "global_seqs")


@LOSS_AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    loss: Tensor,
    mask: Tensor,
    *,
    global_seqs: float | Tensor | None = None,
    max_len: int | None = None,
    **_: object,
) -> Tensor:
    """``Σ L·M / (max_len · N_seqs)`` (Dr.GRPO; TRL ``dr_grpo`` = ``/(B·max_completion_length)``).

    ``max_len`` defaults to the padded length L; pass the configured maximum response length so
    the constant does not change with the batch.
    """
    sums, lengths = _masked_sums(loss, mask)  # (B,), (B,)
    constant = loss.shape[-1] if max_len is None else max_len
    if constant <= 0:
        raise InvalidInputError(f"max_len must be > 0, got {max_len}")
    n_seqs = _count(global_seqs, (lengths > 0).sum().to(loss.dtype), "global_seqs")
    return sums.sum() / (constant * n_seqs)


def aggregate(
    loss: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    global_tokens: float | Tensor | None = None,
    global_seqs: float | Tensor | None = None,
    max_len: int | None = None,
    world_size: int = 1,
) -> Tensor:
    """Reduce a per-token loss (B, L) to a scalar with the registered ``mode``.

    ``global_tokens`` / ``global_seqs`` are the masked-token count / the number of sequences
    with at least one masked token over the *whole* batch being stepped on; with them, the sum
    over micro-batches equals the full-batch loss. Locally, a row with no masked token is not
    counted as a sequence (unscored rollouts carry an all-zero mask). ``world_size`` multiplies
    the result, undoing DDP's gradient averaging when the counts span all ranks (verl's dp_size).
    """
    fn = LOSS_AGGREGATIONS.get(mode)
    out = fn(loss, mask, global_tokens=global_tokens, global_seqs=global_seqs, max_len=max_len)
    return out * world_size


def batch_counts(mask: Tensor) -> tuple[int, int]:
    """``(global_tokens, global_seqs)`` of a full-batch mask (B, L), for :func:`aggregate`."""
    lengths = mask.to(torch.bool).sum(-1)  # (B,)
    return int(lengths.sum()), int((lengths > 0).sum())


def aggregate_scoped(
    loss: Tensor,
    scope_masks: Tensor,
    *,
    global_scope_tokens: Tensor | None = None,
    active_scopes: int | None = None,
    world_size: int = 1,
) -> Tensor:
    """EVisRAG's released "router" combination of per-scope losses, (B, K, L) -> scalar.

    Each scope k's loss is a token mean over its own mask; upstream then weights it by this
    micro-batch's share of the scope's mini-batch tokens and divides by the number of non-zero
    scope losses: ``Σ_k loss_k·tokens_k·world/total_tokens_k / #(loss_k != 0)``. That is the
    upstream behaviour (not the paper's Eq. 10, which is one token mean over all tokens).

    ``global_scope_tokens`` (K,) are the per-scope token counts over the whole batch (default:
    this call's). ``active_scopes`` replaces the per-call non-zero count; pass
    :func:`active_scope_count` of the full batch to make micro-batching exact (upstream counts
    per micro-batch). Deviation: a scope with no token anywhere contributes 0 here, where
    upstream's ``0/0`` gives NaN. KL "averaged over the reward masks": add ``coef·kl_t`` as a
    (B, 1, L) term to the per-scope loss before calling, so each scope averages it over its tokens.
    """
    if loss.shape != scope_masks.shape or loss.dim() != 3:
        raise InvalidInputError(
            f"loss and scope_masks must both be (B, K, L), got {tuple(loss.shape)} "
            f"and {tuple(scope_masks.shape)}"
        )
    m = scope_masks.to(torch.bool)  # (B, K, L)
    sums = torch.where(m, loss, torch.zeros_like(loss)).sum(dim=(0, 2))  # (K,)
    local = m.sum(dim=(0, 2)).to(loss.dtype)  # (K,)
    total = local if global_scope_tokens is None else global_scope_tokens.to(loss.dtype)  # (K,)
    share = sums * world_size / total.clamp(min=1.0)  # (K,)
    per_scope = torch.where(total > 0, share, torch.zeros_like(sums))  # (K,)
    upstream_count = (sums / (local + 1e-8) != 0).sum()  # upstream: (loss != 0).sum()
    active = upstream_count if active_scopes is None else torch.as_tensor(active_scopes)
    return per_scope.sum() / active.clamp(min=1).to(loss.dtype)


def active_scope_count(advantages: Tensor, scope_masks: Tensor) -> int:
    """Number of scopes with a non-zero advantage on at least one of their tokens, (B, K) and
    (B, K, L) -> int: the scopes whose router loss is non-zero, counted over a full batch."""
    hit = (advantages.unsqueeze(-1) != 0) & scope_masks.to(torch.bool)  # (B, K, L)
    return int(hit.any(dim=2).any(dim=0).sum())
