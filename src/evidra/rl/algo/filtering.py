"""DAPO dynamic sampling (drop groups with no learning signal, resample until the batch is full)
and offline difficulty filtering of a dataset.

Group predicates work on a (P, G) reward tensor and return which groups to keep (P,):

* :func:`std_above` keeps groups whose rewards are not all equal (DAPO: ``0 < acc < 1``; with
  continuous rewards OpenRLHF #1270 asks for exactly this std test). Given (P, G, K) reward
  channels (:func:`sampling_rewards` for RS-GRPO, which normalises each channel in its group), it
  keeps a group when any channel varies: equal totals with differing channels still carry signal;
* :func:`mean_within` keeps groups whose mean is strictly inside ``(low, high)`` (EasyR1's
  ``online_filtering`` 0.01/0.99; EVisRAG keeps ``0.01 < mean(overall) < 6.9``);
* :func:`all_of` combines predicates. ``DAPO_FILTER`` and ``EVISRAG_FILTER`` are the presets.

:class:`DynamicSampler` keeps calling a generator callback for new rounds until enough groups
pass, capped at ``max_rounds`` (verl recipe ``max_num_gen_batches``). :class:`NoVarianceWatch`
notices a run whose groups keep earning a single reward (a base model that never earns one).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar

import torch
from torch import Tensor

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.rewards.reward import RewardResult

GroupPredicate = Callable[[Tensor], Tensor]  # (P, G) rewards -> (P,) bool keep
T = TypeVar("T")


def _as_groups(rewards: Tensor, channels: bool = True) -> Tensor:
    shapes = "(P, G) or (P, G, K)" if channels else "(P, G)"
    if rewards.dim() not in ((2, 3) if channels else (2,)) or rewards.shape[1] < 1:
        raise InvalidInputError(f"group rewards must be {shapes}, got shape {tuple(rewards.shape)}")
    return rewards.to(torch.float64)  # (P, G) or (P, G, K)


def std_above(tol: float = 0.0) -> GroupPredicate:
    """Keep groups whose population std exceeds ``tol`` (their rewards are not all equal); for
    (P, G, K) reward channels, groups where any channel's std does.

    >>> std_above()(torch.tensor([[1.0, 1.0], [0.0, 1.0]])).tolist()
    [False, True]
    >>> std_above()(torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])).tolist()  # totals 1, 1; channels differ
    [True]
    """

    def keep(rewards: Tensor) -> Tensor:
        groups = _as_groups(rewards)  # (P, G) or (P, G, K)
        spread = groups.std(dim=1, correction=0) > tol  # (P,) or (P, K)
        return spread if spread.dim() == 1 else spread.any(dim=1)  # (P,)

    return keep


def mean_within(low: float, high: float) -> GroupPredicate:
    """Keep groups whose mean reward lies strictly between ``low`` and ``high`` ((P, G) totals:
    a band on the overall reward, as EVisRAG's released filter reads it)."""
    if not low < high:
        raise InvalidInputError(f"mean_within needs low < high, got ({low}, {high})")

    def keep(rewards: Tensor) -> Tensor:
        mean = _as_groups(rewards, channels=False).mean(dim=1)  # (P,)
        return (mean > low) & (mean < high)

    return keep


def all_of(*predicates: GroupPredicate) -> GroupPredicate:
    """Keep a group only if every predicate keeps it."""

    def keep(rewards: Tensor) -> Tensor:
        out = torch.ones(rewards.shape[0], dtype=torch.bool)  # (P,)
        for predicate in predicates:
            out &= predicate(rewards)
        return out

    return keep


DAPO_FILTER: GroupPredicate = std_above(0.0)  # DAPO: drop all-correct / all-wrong groups
EVISRAG_FILTER: GroupPredicate = mean_within(0.01, 6.9)  # EVisRAG on the 'overall' reward


def group_filter(keep_mean_range: Sequence[float] = ()) -> GroupPredicate:
    """The dynamic-sampling rule of ``algo.keep_mean_range``: empty drops the groups whose rewards
    are all equal (DAPO: no learning signal), ``[low, high]`` keeps the groups whose mean lies
    strictly inside (a released band, e.g. EVisRAG's ``[0.01, 6.9]`` on its released reward scale).

    >>> group_filter()(torch.tensor([[2.0, 2.0], [0.5, 2.5]])).tolist()
    [False, True]
    >>> group_filter([0.01, 6.9])(torch.tensor([[2.0, 2.0], [0.0, 0.0]])).tolist()
    [True, False]
    """
    return mean_within(*keep_mean_range) if keep_mean_range else DAPO_FILTER


def sampling_rewards(
    groups: Sequence[Sequence[RewardResult]], scope_names: Sequence[str] = (), per_scope: bool = False
) -> Tensor:
    """What dynamic sampling reads of each group's results: the totals (P, G), or, when the
    advantage normalises each reward channel in its group (``per_scope``: RS-GRPO, the router),
    the channels ``scope_names`` (P, G, K). A group whose totals are equal but whose channels
    differ gets non-zero per-channel advantages, so DAPO must keep it.

    >>> a = RewardResult(1.0, scopes={"x": 1.0, "y": 0.0})
    >>> b = RewardResult(1.0, scopes={"x": 0.0, "y": 1.0})
    >>> DAPO_FILTER(sampling_rewards([[a, b]])).tolist()  # totals 1, 1
    [False]
    >>> DAPO_FILTER(sampling_rewards([[a, b]], ("x", "y"), per_scope=True)).tolist()
    [True]
    """
    if per_scope and scope_names:
        return torch.tensor([[[r.scopes.get(n, 0.0) for n in scope_names] for r in g] for g in groups])
    return torch.tensor([[r.total for r in g] for g in groups])  # (P, G)


def filter_groups(rewards: Tensor, predicate: GroupPredicate = DAPO_FILTER) -> Tensor:
    """Keep mask (P,) of the groups of ``rewards`` (P, G), or (P, G, K), that pass ``predicate``."""
    keep = predicate(_as_groups(rewards))  # (P,)
    if keep.shape != (rewards.shape[0],) or keep.dtype != torch.bool:
        raise InvalidInputError(
            f"a group predicate must return a (P,) bool tensor, got {keep.dtype} {tuple(keep.shape)}"
        )
    return keep


def no_variance(rewards: Tensor) -> bool:
    """Whether every group of ``rewards`` (P, G) earned a single reward, so that every group-relative
    advantage is 0 and nothing learns. NaN marks an episode without a reward (unscored); a step
    with no reward at all says nothing and counts as False.

    >>> no_variance(torch.tensor([[-1.0, -1.0], [2.0, float("nan")]]))
    True
    >>> no_variance(torch.tensor([[-1.0, -1.0], [0.0, 1.0]]))
    False
    """
    groups = _as_groups(rewards)  # (P, G)
    finite = torch.isfinite(groups)
    if not bool(finite.any()):
        return False
    high = torch.where(finite, groups, -math.inf).amax(dim=1)  # (P,)
    low = torch.where(finite, groups, math.inf).amin(dim=1)  # (P,)
    return bool((high <= low).all())


@dataclass
class NoVarianceWatch:
    """Counts the steps in a row whose groups each earned a single reward (:func:`no_variance`)
    and says once, after ``after`` of them, that the run has nothing to learn from; 0 never does."""

    after: int
    streak: int = 0
    warned: bool = False

    def observe(self, rewards: Tensor) -> bool:
        """Count one step's sampled rewards (P, G); True on the one step the warning is due.

        >>> watch = NoVarianceWatch(2)
        >>> [watch.observe(torch.zeros(2, 3)) for _ in range(4)]
        [False, True, False, False]
        """
        if self.after < 1 or self.warned:
            return False
        self.streak = self.streak + 1 if no_variance(rewards) else 0
        self.warned = self.streak >= self.after
        return self.warned


@dataclass(frozen=True)
class Round(Generic[T]):
    """One generation round: a payload per group and the groups' rewards (P, G)."""

    groups: Sequence[T]
    rewards: Tensor  # (P, G)


@dataclass(frozen=True)
class SamplingResult(Generic[T]):
    """The groups kept for one training batch and what it took to collect them."""

    groups: list[T]
    rounds: int  # generation rounds used
    generated: int  # groups generated over all rounds
    filtered: int  # groups dropped by the predicate
    surplus: int  # kept groups beyond the batch size, discarded (verl truncates them)
    full: bool  # True if ``batch_groups`` were collected
    per_round_kept: list[int] = field(default_factory=list)


class DynamicSamplingError(EvidraError, RuntimeError):
    """Too few groups passed the filter within ``max_rounds``."""


class DynamicSampler(Generic[T]):
    """Accumulate groups that pass ``predicate`` over generation rounds until ``batch_groups``.

    ``generate(round_index)`` returns a :class:`Round`. After ``max_rounds`` rounds without a full
    batch, ``on_short="raise"`` raises (verl's DAPO recipe does) and ``"partial"`` returns
    what was kept with ``full=False``.
    """

    def __init__(
        self,
        batch_groups: int,
        predicate: GroupPredicate = DAPO_FILTER,
        *,
        max_rounds: int = 10,
        on_short: Literal["raise", "partial"] = "raise",
    ) -> None:
        if batch_groups < 1 or max_rounds < 1:
            raise InvalidInputError(
                f"batch_groups and max_rounds must be >= 1, got {batch_groups} and {max_rounds}"
            )
        if on_short not in ("raise", "partial"):
            raise InvalidInputError(f"on_short must be 'raise' or 'partial', got {on_short!r}")
        self.batch_groups, self.predicate = batch_groups, predicate
        self.max_rounds, self.on_short = max_rounds, on_short

    def collect(self, generate: Callable[[int], Round[T]]) -> SamplingResult[T]:
        """Run rounds until the batch is full or ``max_rounds`` is reached."""
        kept: list[T] = []
        generated = filtered = rounds = 0
        per_round: list[int] = []
        while len(kept) < self.batch_groups and rounds < self.max_rounds:
            batch = generate(rounds)
            rounds += 1
            if len(batch.groups) != batch.rewards.shape[0]:
                raise InvalidInputError(
                    f"round {rounds - 1} has {len(batch.groups)} groups but rewards for "
                    f"{batch.rewards.shape[0]}; return one reward row per group"
                )
            keep = filter_groups(batch.rewards, self.predicate).tolist()  # (P,)
            kept.extend(g for g, k in zip(batch.groups, keep, strict=True) if k)
            generated += len(keep)
            filtered += len(keep) - sum(keep)
            per_round.append(sum(keep))
        full = len(kept) >= self.batch_groups
        if not full and self.on_short == "raise":
            raise DynamicSamplingError(
                f"only {len(kept)} of {self.batch_groups} groups passed the filter in {rounds} rounds "
                f"({filtered} of {generated} filtered); raise max_rounds, loosen the predicate, "
                "or pass on_short='partial'"
            )
        return SamplingResult(
            groups=kept[: self.batch_groups],
            rounds=rounds,
            generated=generated,
            filtered=filtered,
            surplus=max(0, len(kept) - self.batch_groups),
            full=full,
            per_round_kept=per_round,
        )
