"""The advantage estimators behind ``algo.advantage``: one input record, one output record.

Every estimator takes an ``AdvantageInputs`` (the batch's rewards and whatever else an estimator may
read: reward channels with their token scopes, per-turn credits) and returns ``Advantages`` (one
value per rollout, per token, or per scope). They are registered in ``ADVANTAGES`` as
``Estimator`` records whose ``fn`` is typed by the ``AdvantageFn`` protocol, so a variant whose
signature drifts is a type error, and whose flags say what the estimator needs from a task
(``needs_scopes``) and how its loss is taken (``per_scope_loss``), so configuration checks read
the registry instead of naming estimators. The maths lives in :mod:`evidra.rl.algo.advantages`.

>>> import torch
>>> out = ADVANTAGES.get("grpo").fn(AdvantageInputs(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4))
>>> out.to_tokens(2)
tensor([[ 0.8660,  0.8660],
        [-0.8660, -0.8660],
        [ 0.8660,  0.8660],
        [-0.8660, -0.8660]])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypedDict

from torch import Tensor

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.registry import Registry
from evidra.core.types import Span
from evidra.rl.algo.advantages import (
    Index,
    ScopedAdvantages,
    Singleton,
    StdKind,
    TurnNorm,
    grpo,
    router_advantages,
    rs_grpo_advantages,
    similarity_baseline_advantages,
    turn_credit_advantages,
)


class GroupOptions(TypedDict):
    """The keywords every group-normalising function of ``advantages`` takes alike."""

    index: Index
    valid: Tensor | None
    scale_by_std: bool
    eps: float
    std: StdKind
    singleton: Singleton


@dataclass(frozen=True, eq=False)
class AdvantageInputs:
    """Everything an estimator may read. ``N = P*G`` rollouts, grouped by ``group_size`` or ``index``."""

    rewards: Tensor  # (N,) one scalar reward per rollout
    group_size: int | None = None
    index: Index = None  # one group id per rollout, instead of contiguous groups
    valid: Tensor | None = None  # (N,) bool: rollouts whose reward was computed
    scale_by_std: bool = True  # False: Dr.GRPO's mean-only baseline
    eps: float = 1e-6
    std: StdKind = "unbiased"
    singleton: Singleton = "raise"  # a group with one valid rollout: error, or advantage 0
    length: int = 1  # L: padded response tokens per rollout
    scope_rewards: Tensor | None = None  # (N, K) reward channels (``RewardResult.scopes``)
    scope_masks: Tensor | None = None  # (N, K, L) 1 on the policy tokens of each channel's scope
    turn_credits: Tensor | None = None  # (N, T) per-turn credits (``RewardResult.turns``)
    turn_mask: Tensor | None = None  # (N, T) 1 on turns that exist
    turn_spans: Sequence[Sequence[Span]] = ()  # each rollout's policy-turn token spans
    turn_norm: TurnNorm = "trajectory"
    # (N, N, T) how alike rollout j's state is to rollout i's before i's turn k (1 on the diagonal;
    # ``credit.prefix_similarity``); filled for estimators with ``needs_similarity`` (spo)
    similarity: Tensor | None = None

    def channels(self, estimator: str) -> tuple[Tensor, Tensor]:
        """``scope_rewards`` (N, K) and ``scope_masks`` (N, K, L), or an error naming ``estimator``."""
        if self.scope_rewards is None or self.scope_masks is None:
            raise ConfigError(f"advantage {estimator} needs a task with scope names (its reward channels)")
        return self.scope_rewards, self.scope_masks

    def group_options(self) -> GroupOptions:
        """How rollouts are grouped and normalised, as the keywords of ``advantages``' functions."""
        return GroupOptions(
            index=self.index,
            valid=self.valid,
            scale_by_std=self.scale_by_std,
            eps=self.eps,
            std=self.std,
            singleton=self.singleton,
        )


@dataclass(frozen=True, eq=False)
class Advantages:
    """An estimator's result: exactly one of one value per rollout ``(N,)``, per token ``(N, L)``,
    or per scope (``ScopedAdvantages``, whose policy loss is taken scope by scope)."""

    sequence: Tensor | None = None  # (N,)
    tokens: Tensor | None = None  # (N, L)
    scoped: ScopedAdvantages | None = None  # (N, K, L)

    def __post_init__(self) -> None:
        given = [x is not None for x in (self.sequence, self.tokens, self.scoped)]
        if sum(given) != 1:
            raise InvalidInputError("Advantages holds exactly one of sequence, tokens or scoped")

    def to_tokens(self, length: int) -> Tensor | ScopedAdvantages:
        """Per-token advantages ``(N, L)`` (a rollout's value spread over its tokens), or the
        ``ScopedAdvantages`` as they are."""
        if self.scoped is not None:
            return self.scoped
        if self.tokens is not None:
            return self.tokens
        assert self.sequence is not None
        return self.sequence[:, None].expand(self.sequence.shape[0], length).clone()  # (N, L)


class AdvantageFn(Protocol):
    def __call__(self, inputs: AdvantageInputs, /) -> Advantages: ...


@dataclass(frozen=True)
class Estimator:
    """A registered estimator and what it asks of the task and the loss."""

    fn: AdvantageFn
    needs_scopes: bool = False  # reads reward channels: the task must name its scopes
    per_scope_loss: bool = False  # returns ScopedAdvantages: the loss is a token mean per scope
    needs_similarity: bool = False  # reads AdvantageInputs.similarity (built only for these)


ADVANTAGES: Registry[Estimator] = Registry("advantage estimator")


def estimator(
    name: str, *, needs_scopes: bool = False, per_scope_loss: bool = False, needs_similarity: bool = False
) -> Callable[[AdvantageFn], AdvantageFn]:
    """Register ``fn`` in ``ADVANTAGES`` as ``name`` with its flags."""

    def decorator(fn: AdvantageFn) -> AdvantageFn:
        ADVANTAGES.add(name, Estimator(fn, needs_scopes, per_scope_loss, needs_similarity))
        return fn

    return decorator


@estimator("grpo")
def grpo_estimator(x: AdvantageInputs) -> Advantages:
    """GRPO: each rollout's reward normalised in its group (``scale_by_std`` off gives Dr.GRPO)."""
    return Advantages(sequence=grpo(x.rewards, x.group_size, **x.group_options()))  # (N,)


@estimator("dr_grpo")
def dr_grpo_estimator(x: AdvantageInputs) -> Advantages:
    """Dr.GRPO: reward minus the group mean, whatever ``scale_by_std`` says."""
    return grpo_estimator(replace(x, scale_by_std=False))  # (N,)


@estimator("rs_grpo", needs_scopes=True)
def rs_grpo_estimator(x: AdvantageInputs) -> Advantages:
    """EVisRAG RS-GRPO (Eq. 7-10): channel rewards averaged per token scope, then normalised."""
    rewards, masks = x.channels("rs_grpo")  # (N, K), (N, K, L)
    return Advantages(tokens=rs_grpo_advantages(rewards, masks, x.group_size, **x.group_options()))


@estimator("router", needs_scopes=True, per_scope_loss=True)
def router_estimator(x: AdvantageInputs) -> Advantages:
    """EVisRAG's released ``compute_router_outcome_advantage``: every channel z-scored in its group
    on its own (so the x3 weights of accuracy and evidence cancel), each on its own scope."""
    rewards, masks = x.channels("router")  # (N, K), (N, K, L)
    adv = router_advantages(rewards, x.group_size, **x.group_options())  # (N, K)
    return Advantages(scoped=ScopedAdvantages.broadcast(adv, masks))


@estimator("turn_credit")
def turn_credit_estimator(x: AdvantageInputs) -> Advantages:
    """CAVE's per-turn process credits spread over each turn's tokens."""
    if x.turn_credits is None or x.turn_mask is None:
        raise ConfigError(
            "advantage turn_credit needs per-turn credits (a reward that fills RewardResult.turns)"
        )
    return Advantages(
        tokens=turn_credit_advantages(
            x.turn_credits,
            x.turn_mask,
            x.turn_spans,
            x.length,
            x.group_size,
            normalize=x.turn_norm,
            **x.group_options(),
        )
    )


@estimator("spo", needs_similarity=True)
def spo_estimator(x: AdvantageInputs) -> Advantages:
    """MM-Doc-R1's SPO: each turn's baseline is its group's rewards averaged with the weights of how
    alike the other rollouts' states are to this one's before the turn."""
    if x.similarity is None or x.turn_mask is None:
        raise ConfigError("advantage spo needs the rollouts' turn similarities (credit.prefix_similarity)")
    tokens = similarity_baseline_advantages(
        x.rewards,
        x.similarity,
        x.turn_mask,
        x.turn_spans,
        x.length,
        x.group_size,
        **x.group_options(),
    )  # (N, L)
    return Advantages(tokens=tokens)
