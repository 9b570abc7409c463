"""Advantage estimators: group-relative (GRPO, Dr.GRPO), reward-scoped (EVisRAG RS-GRPO),
per-turn process credits (CAVE) and per-turn similarity-weighted baselines (MM-Doc-R1's SPO), as
pure tensor functions (registered as estimators, with one input record, in ``evidra.rl.algo.estimators``).

Conventions shared by every estimator:

* A batch holds ``N = P*G`` rollouts. Groups are either contiguous blocks of ``group_size``
  (TRL's layout) or given by ``index``, one group id per rollout in any order (verl/EasyR1's
  ``uid``, used by the EVisRAG conformance files).
* ``valid (N,)`` marks rollouts whose reward could be computed (``RewardResult.scored``). An
  invalid rollout gets advantage 0 and is left out of its group's mean and std. Rows whose
  reward is NaN are invalid too (TRL marks unscorable rewards with NaN).
* Group statistics: ``std="unbiased"`` is ``torch.std`` (verl, EasyR1, TRL's ``nanstd``);
  ``eps`` is 1e-6 as in verl/EasyR1 (TRL uses 1e-4). A group with fewer than two valid members
  has no baseline: ``singleton="raise"`` mirrors EasyR1's ``assert n > 1``, ``"zero"`` returns 0.

Run the tests with ``OMP_NUM_THREADS=1 .venv/bin/pytest tests/rl/test_advantages.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.core.types import Span
from evidra.rewards.scopes import span_mask

StdKind = Literal["unbiased", "biased"]
Singleton = Literal["raise", "zero"]
Index = Sequence[Hashable] | Tensor | None


def group_ids(n: int, group_size: int | None = None, index: Index = None) -> Tensor:
    """Group id (0..P-1, by first appearance) of each of ``n`` rollouts.

    >>> group_ids(4, 2).tolist(), group_ids(4, index=["b", "a", "b", "a"]).tolist()
    ([0, 0, 1, 1], [0, 1, 0, 1])
    """
    if index is not None:
        keys = index.tolist() if isinstance(index, Tensor) else list(index)
        if len(keys) != n:
            raise InvalidInputError(f"index has {len(keys)} group ids for {n} rollouts; give one per rollout")
        first: dict[Hashable, int] = {}
        return torch.tensor([first.setdefault(k, len(first)) for k in keys], dtype=torch.long)
    if group_size is None or group_size < 1:
        raise InvalidInputError(f"group_size must be a positive int, got {group_size!r}; or pass index=")
    if n % group_size:
        raise InvalidInputError(
            f"{n} rollouts do not split into groups of {group_size}; pass index= for uneven groups"
        )
    return torch.arange(n) // group_size  # (N,)


def _valid_rows(scores: Tensor, valid: Tensor | None) -> Tensor:
    """Rows to use: ``valid`` (default: all) and finite; a valid row with a NaN reward is an error."""
    flat = scores.reshape(scores.shape[0], -1)  # (N, K)
    finite = torch.isfinite(flat).all(dim=1)  # (N,)
    if valid is None:
        return finite
    valid = valid.to(torch.bool).reshape(-1)  # (N,)
    if valid.shape[0] != scores.shape[0]:
        raise InvalidInputError(f"valid has {valid.shape[0]} entries for {scores.shape[0]} rollouts")
    bad = (valid & ~finite).nonzero().flatten().tolist()
    if bad:
        raise InvalidInputError(
            f"rollouts {bad} are marked valid but have non-finite rewards; mark them valid=False"
        )
    return valid


def group_normalize(
    scores: Tensor,
    groups: Tensor,
    *,
    valid: Tensor | None = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    singleton: Singleton = "raise",
) -> Tensor:
    """``(r - mean_g) / (std_g + eps)`` per group ``g`` and per column; no std when
    ``scale_by_std=False``. Statistics use valid rows only; invalid rows get 0.

    Each column of a ``(N, K)`` input is normalised separately, as EVisRAG's
    ``compute_router_outcome_advantage`` does. The arithmetic follows verl's
    ``compute_grpo_outcome_advantage`` (float32 mean, ``torch.std``, then ``(r - m) / (s + eps)``).
    """
    if std not in ("unbiased", "biased"):
        raise InvalidInputError(f"std must be 'unbiased' or 'biased', got {std!r}")
    x = scores.unsqueeze(-1) if scores.dim() == 1 else scores  # (N, K)
    rows = _valid_rows(x, valid)  # (N,)
    out = torch.zeros_like(x)  # (N, K)
    for g in torch.unique(groups).tolist():
        members = (groups == g) & rows  # (N,)
        n = int(members.sum())
        if n == 0:
            continue
        if n == 1:
            if singleton == "raise":
                raise InvalidInputError(
                    f"group {g} has one valid rollout, so it has no baseline; sample more than one "
                    "completion per prompt, or pass singleton='zero' to give it advantage 0"
                )
            continue
        for k in range(x.shape[1]):  # 1-D reductions per column: bit-identical to upstream
            vals = x[members, k].contiguous()  # (n,)
            adv = vals - vals.mean()  # (n,)
            if scale_by_std:
                adv = adv / (vals.std(correction=1 if std == "unbiased" else 0) + eps)
            out[members, k] = adv
    return out.reshape(scores.shape)


def grpo(
    rewards: Tensor,
    group_size: int | None = None,
    *,
    index: Index = None,
    valid: Tensor | None = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    singleton: Singleton = "raise",
) -> Tensor:
    """Group-relative outcome advantages ``A_i = (r_i - mean_G) / (std_G + eps)``, shape (P*G,).

    Defaults reproduce verl/EasyR1 (``torch.std``, eps 1e-6, error on a group of one); TRL is
    ``eps=1e-4``. ``scale_by_std=False`` gives Dr.GRPO.

    >>> grpo(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4)
    tensor([ 0.8660, -0.8660,  0.8660, -0.8660])
    """
    if rewards.dim() != 1:
        raise InvalidInputError(f"rewards must be 1-D (P*G,), got shape {tuple(rewards.shape)}")
    groups = group_ids(rewards.shape[0], group_size, index)  # (P*G,)
    return group_normalize(
        rewards, groups, valid=valid, scale_by_std=scale_by_std, eps=eps, std=std, singleton=singleton
    )


def dr_grpo(
    rewards: Tensor,
    group_size: int | None = None,
    *,
    index: Index = None,
    valid: Tensor | None = None,
    singleton: Singleton = "raise",
) -> Tensor:
    """Dr.GRPO advantages ``A_i = r_i - mean_G`` (no std division), shape (P*G,).

    verl: ``norm_adv_by_std_in_grpo=False``; TRL: ``scale_rewards="none"``.
    """
    return grpo(rewards, group_size, index=index, valid=valid, scale_by_std=False, singleton=singleton)


def router_advantages(
    rewards: Tensor,
    group_size: int | None = None,
    *,
    index: Index = None,
    valid: Tensor | None = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    singleton: Singleton = "raise",
) -> Tensor:
    """Per-channel group-normalised advantages, (B, K) -> (B, K): each of the K reward channels
    is z-scored within its group on its own (EVisRAG upstream ``compute_router_outcome_advantage``).

    Combine with :func:`scoped_token_advantages` (one (B, L) advantage) or with
    ``losses.aggregate_scoped`` (upstream's per-scope losses).
    """
    if rewards.dim() != 2:
        raise InvalidInputError(
            f"rewards must be (B, K) per reward channel, got shape {tuple(rewards.shape)}"
        )
    groups = group_ids(rewards.shape[0], group_size, index)  # (B,)
    return group_normalize(
        rewards, groups, valid=valid, scale_by_std=scale_by_std, eps=eps, std=std, singleton=singleton
    )


@dataclass(frozen=True, eq=False)
class ScopedAdvantages:
    """Advantages for a loss taken per scope (EVisRAG's released router): each channel's advantage
    on its own scope's tokens. The policy loss is computed once per scope and the per-scope losses
    are combined by ``losses.aggregate_scoped``, not by a token-level aggregation."""

    values: Tensor  # (N, K, L): channel k's advantage on the tokens of its scope, 0 elsewhere
    masks: Tensor  # (N, K, L): 1 on the (policy) tokens of scope k

    def __post_init__(self) -> None:
        if self.values.dim() != 3 or self.values.shape != self.masks.shape:
            raise InvalidInputError(
                f"scoped advantages and masks must both be (N, K, L), got {tuple(self.values.shape)} "
                f"and {tuple(self.masks.shape)}"
            )

    @classmethod
    def broadcast(cls, advantages: Tensor, scope_masks: Tensor) -> ScopedAdvantages:
        """(N, K) channel advantages (:func:`router_advantages`) on (N, K, L) scope masks."""
        _check_scope_shapes(advantages, scope_masks)
        masks = scope_masks.to(advantages.dtype)  # (N, K, L)
        return cls(advantages.unsqueeze(-1) * masks, masks)


def scoped_token_advantages(
    advantages: Tensor, scope_masks: Tensor, *, combine: Literal["sum", "mean"] = "sum"
) -> Tensor:
    """Broadcast each channel's advantage onto its own token scope: (B, K), (B, K, L) -> (B, L).

    ``combine="sum"`` adds the advantages of every channel whose scope covers a token;
    ``"mean"`` averages them (normalise-then-average, the per-advantage analogue of Eq. 8).
    Neither is the paper's Eq. 9 (average rewards, then normalise: :func:`rs_grpo_advantages`)
    nor upstream's per-scope loss (``losses.aggregate_scoped``); both are offered for ablations.
    """
    _check_scope_shapes(advantages, scope_masks)
    m = scope_masks.to(advantages.dtype)  # (B, K, L)
    total = (advantages.unsqueeze(-1) * m).sum(dim=1)  # (B, L)
    if combine == "sum":
        return total
    if combine == "mean":
        return total / m.sum(dim=1).clamp(min=1.0)  # (B, L)
    raise InvalidInputError(f"combine must be 'sum' or 'mean', got {combine!r}")


def _check_scope_shapes(values: Tensor, scope_masks: Tensor) -> None:
    if scope_masks.dim() != 3 or values.shape != scope_masks.shape[:2]:
        raise InvalidInputError(
            f"scope_masks must be (B, K, L) matching values (B, K) = {tuple(values.shape)}, "
            f"got {tuple(scope_masks.shape)}"
        )


def rs_grpo_advantages(
    rewards: Tensor,
    scope_masks: Tensor,
    group_size: int | None = None,
    *,
    index: Index = None,
    valid: Tensor | None = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    singleton: Singleton = "raise",
) -> Tensor:
    """EVisRAG RS-GRPO token advantages as in the paper, (B, K) rewards -> (B, L).

    Eq. 7: ``scope_masks[b, k, t]`` says channel k applies to token t (its ``M(t)``).
    Eq. 8: ``R̄_t`` is the mean of the rewards of the channels in ``M(t)``.
    Eq. 9: ``R̄_t`` is group-normalised over the G samples with the same ``M(t)``: every
    channel combination present in the batch is normalised as one reward per rollout. Tokens
    no channel covers get 0. Eq. 10 is then the DAPO loss with ``aggregate(..., "token-mean")``.
    """
    _check_scope_shapes(rewards, scope_masks)
    n_channels = rewards.shape[1]
    if n_channels > 62:
        raise InvalidInputError(f"at most 62 reward channels are supported, got {n_channels}")
    groups = group_ids(rewards.shape[0], group_size, index)  # (B,)
    bits = 2 ** torch.arange(n_channels)  # (K,)
    codes = (scope_masks.to(torch.bool).long() * bits[None, :, None]).sum(dim=1)  # (B, L)
    out = torch.zeros(codes.shape, dtype=rewards.dtype)  # (B, L)
    for code in torch.unique(codes).tolist():
        if code == 0:
            continue
        channels = ((code // bits) % 2).to(torch.bool)  # (K,)
        mean_reward = rewards[:, channels].mean(dim=1)  # (B,)  Eq. 8
        adv = group_normalize(  # (B,)  Eq. 9
            mean_reward, groups, valid=valid, scale_by_std=scale_by_std, eps=eps, std=std, singleton=singleton
        )
        out = torch.where(codes == code, adv[:, None], out)
    return out


TurnNorm = Literal["trajectory", "turn_index", "group_turns", "none"]


def turn_credit_advantages(
    turn_values: Tensor,
    turn_mask: Tensor,
    turn_spans: Sequence[Sequence[Span]],
    length: int,
    group_size: int | None = None,
    *,
    index: Index = None,
    valid: Tensor | None = None,
    normalize: TurnNorm = "trajectory",
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    singleton: Singleton = "zero",
) -> Tensor:
    """Spread per-turn process credits over each turn's tokens: (B, T_max) -> (B, L).

    ``turn_values[b, k]`` is the credit of turn k (already weighted and bounded by the caller);
    ``turn_mask[b, k]`` is 1 for turns that exist. ``normalize``:

    * ``"trajectory"`` (default, CAVE §3.3 and Algorithm 1): step credits are summed into one
      trajectory reward, which is group-normalised as in GRPO; every turn token gets it.
    * ``"turn_index"``: normalise turn k across the group's rollouts that reached turn k
      (verl RFC #7244 warns this is biased when the policy decides when to stop).
    * ``"group_turns"``: normalise every turn against all turns of the whole group.
    * ``"none"``: the raw credits.
    """
    if turn_values.dim() != 2 or turn_mask.shape != turn_values.shape:
        raise InvalidInputError(
            f"turn_values and turn_mask must both be (B, T_max), got {tuple(turn_values.shape)} "
            f"and {tuple(turn_mask.shape)}"
        )
    b, t_max = turn_values.shape
    present = turn_mask.to(torch.bool)  # (B, T)
    values = turn_values.masked_fill(~present, 0.0)  # (B, T)
    rows = _valid_rows(values, valid)  # (B,)
    norm = partial(group_normalize, scale_by_std=scale_by_std, eps=eps, std=std, singleton=singleton)
    per_turn = _normalise_turns(values, present, rows, group_ids(b, group_size, index), normalize, norm)
    per_turn = per_turn * (present & rows[:, None])  # (B, T)
    masks = turn_masks(turn_spans, t_max, length, dtype=turn_values.dtype)  # (B, T, L)
    return (per_turn.unsqueeze(-1) * masks).sum(dim=1)  # (B, L)


def _normalise_turns(
    values: Tensor, present: Tensor, rows: Tensor, groups: Tensor, normalize: str, norm: Callable[..., Tensor]
) -> Tensor:
    """Per-turn advantages (B, T) for :func:`turn_credit_advantages`'s ``normalize`` modes."""
    b, t_max = values.shape
    if normalize == "trajectory":
        return norm(values.sum(dim=1), groups, valid=rows)[:, None].expand(b, t_max)  # (B, T)
    if normalize == "none":
        return values
    if normalize == "turn_index":
        turn_groups = groups[:, None] * t_max + torch.arange(t_max)[None, :]  # (B, T)
    elif normalize == "group_turns":
        turn_groups = groups[:, None].expand(b, t_max)  # (B, T)
    else:
        raise InvalidInputError(
            f"normalize must be trajectory, turn_index, group_turns or none, got {normalize!r}"
        )
    keep = (present & rows[:, None]).reshape(-1)  # (B*T,)
    return norm(values.reshape(-1), turn_groups.reshape(-1), valid=keep).reshape(b, t_max)


def spans_to_mask(
    spans: Sequence[Sequence[Span]], length: int, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """(B, L) 0/1 mask that is 1 on the union of each row's half-open spans (each span's mask is
    ``rewards.scopes.span_mask``, the one definition).

    >>> spans_to_mask([[Span(1, 3)], [Span(0, 1), Span(3, 4)]], 4)
    tensor([[0., 1., 1., 0.],
            [1., 0., 0., 1.]])
    """
    mask = torch.zeros(len(spans), length, dtype=dtype)  # (B, L)
    for row, row_spans in enumerate(spans):
        for span in row_spans:
            if span.end > length:
                raise InvalidInputError(
                    f"span [{span.start}, {span.end}) of row {row} exceeds length {length}; "
                    "pass the padded response length"
                )
            mask[row] = torch.maximum(mask[row], torch.tensor(span_mask(span, length), dtype=dtype))
    return mask


def turn_masks(
    turn_spans: Sequence[Sequence[Span]], t_max: int, length: int, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """(B, T_max, L) mask, one row per turn span (``Trajectory.turns``); missing turns are 0."""
    too_many = [len(s) for s in turn_spans if len(s) > t_max]
    if too_many:
        raise InvalidInputError(f"a rollout has {max(too_many)} turns but t_max is {t_max}; raise t_max")
    masks = torch.zeros(len(turn_spans), t_max, length, dtype=dtype)  # (B, T, L)
    for k in range(t_max):
        per_row = [[s[k]] if k < len(s) else [] for s in turn_spans]
        masks[:, k] = spans_to_mask(per_row, length, dtype=dtype)
    return masks


def scope_masks_from_spans(
    scopes: Sequence[Mapping[str, Sequence[Span]]],
    names: Sequence[str],
    length: int,
    *,
    policy_mask: Tensor | None = None,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """(B, K, L) masks for the K scope ``names`` from ``Trajectory.scopes``, times ``policy_mask``
    (B, L) when given; a scope a rollout lacks is all zero there."""
    masks = torch.stack(
        [spans_to_mask([row.get(name, ()) for row in scopes], length, dtype=dtype) for name in names], dim=1
    )  # (B, K, L)
    if policy_mask is not None:
        masks = masks * policy_mask.to(dtype).unsqueeze(1)
    return masks


def similarity_baseline_advantages(
    rewards: Tensor,
    similarity: Tensor,
    turn_mask: Tensor,
    turn_spans: Sequence[Sequence[Span]],
    length: int,
    group_size: int | None = None,
    *,
    index: Index = None,
    valid: Tensor | None = None,
    scale_by_std: bool = True,
    eps: float = 1e-6,
    std: StdKind = "unbiased",
    singleton: Singleton = "zero",
) -> Tensor:
    """MM-Doc-R1's SPO: each turn's baseline is the similarity-weighted mean of its group's rewards,
    (N,) rewards and (N, N, T) similarities -> (N, L) token advantages.

    ``similarity[i, j, k]`` is how alike rollout j's state is to rollout i's before i's turn k
    (1 on the diagonal). With ``w = similarity`` restricted to i's group and its valid rollouts:

    * ``b[i, k] = sum_j w[i, j, k] r_j / sum_j w[i, j, k]`` (the weighted baseline),
    * ``A[i, k] = (r_i - b[i, k]) / (std_G + eps)``, the std over the group's valid rewards as in
      GRPO (no division when ``scale_by_std=False``).

    Before the first turn every rollout shares the initial state (all similarities 1), so the
    baseline is the group mean and a single-turn episode gets GRPO's advantage. Each turn's
    advantage covers that turn's tokens (``turn_spans``); invalid rollouts get 0.
    """
    n, t_max = turn_mask.shape
    if rewards.shape != (n,) or similarity.shape != (n, n, t_max):
        raise InvalidInputError(
            f"rewards must be (N,), turn_mask (N, T) and similarity (N, N, T); got "
            f"{tuple(rewards.shape)}, {tuple(turn_mask.shape)} and {tuple(similarity.shape)}"
        )
    rows = _valid_rows(rewards, valid)  # (N,)
    groups = group_ids(n, group_size, index)  # (N,)
    r = torch.where(rows, rewards, torch.zeros_like(rewards))  # (N,)
    same = (groups[:, None] == groups[None, :]) & rows[None, :]  # (N, N): j in i's group and valid
    w = similarity.to(r.dtype).clamp(min=0.0) * same[:, :, None]  # (N, N, T)
    total = w.sum(dim=1)  # (N, T)
    baseline = (w * r[None, :, None]).sum(dim=1) / total.clamp(min=eps)  # (N, T)
    per_turn = r[:, None] - baseline  # (N, T)
    if scale_by_std:
        per_turn = per_turn / (_group_std(r, groups, rows, std) + eps)[:, None]
    counts = same.sum(dim=1)  # (N,) valid members of each rollout's group
    alone = rows & (counts < 2)
    if singleton == "raise" and bool(alone.any()):
        raise InvalidInputError(
            f"rollouts {alone.nonzero().flatten().tolist()} are alone in their group, so they have "
            "no baseline; sample more than one completion per prompt, or pass singleton='zero'"
        )
    keep = turn_mask.to(torch.bool) & (rows & ~alone)[:, None]  # (N, T)
    per_turn = per_turn * keep
    masks = turn_masks(turn_spans, t_max, length, dtype=r.dtype)  # (N, T, L)
    return (per_turn.unsqueeze(-1) * masks).sum(dim=1)  # (N, L)


def _group_std(rewards: Tensor, groups: Tensor, rows: Tensor, std: StdKind) -> Tensor:
    """Each rollout's group std over the valid rewards, (N,) (0 for a group of fewer than two)."""
    out = torch.zeros_like(rewards)  # (N,)
    for g in torch.unique(groups).tolist():
        members = (groups == g) & rows  # (N,)
        if int(members.sum()) > 1:
            out[groups == g] = rewards[members].std(correction=1 if std == "unbiased" else 0)
    return out
