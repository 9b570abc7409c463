"""DAPO dynamic sampling and difficulty filtering, with a fake generator."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.data.construction.difficulty import difficulty_filter
from evidra.rewards.reward import RewardResult
from evidra.rl.algo.filtering import (
    DAPO_FILTER,
    EVISRAG_FILTER,
    DynamicSampler,
    DynamicSamplingError,
    Round,
    all_of,
    filter_groups,
    mean_within,
    sampling_rewards,
    std_above,
)
from evidra.rl.run_config import AlgoConfig
from evidra.rl.trainer import RLTrainer


def test_std_filter_drops_groups_with_equal_rewards() -> None:
    rewards = torch.tensor([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert filter_groups(rewards, DAPO_FILTER).tolist() == [False, True, False]
    # population std of [0, 1, 0] = sqrt(2/9) = 0.4714: kept at tol 0.4, dropped at tol 0.5
    assert filter_groups(rewards, std_above(0.4)).tolist() == [False, True, False]
    assert filter_groups(rewards, std_above(0.5)).tolist() == [False, False, False]


def test_mean_range_is_strict_evisrag_bounds() -> None:
    # means 0, 3, 6.9, 7, 0.01 -> only 3 lies strictly inside (0.01, 6.9)
    rewards = torch.tensor([[0.0, 0.0], [2.0, 4.0], [6.9, 6.9], [7.0, 7.0], [0.01, 0.01]])
    assert filter_groups(rewards, EVISRAG_FILTER).tolist() == [False, True, False, False, False]
    assert filter_groups(rewards, mean_within(-1.0, 6.95)).tolist() == [True, True, True, False, True]
    with pytest.raises(InvalidInputError, match="low < high"):
        mean_within(1.0, 1.0)


def test_all_of_combines_predicates() -> None:
    # [1, 1]: mean 1 but no spread; [0, 2]: mean 1 with spread; [5, 9]: spread, mean 7 too high
    rewards = torch.tensor([[1.0, 1.0], [0.0, 2.0], [5.0, 9.0]])
    both = all_of(std_above(0.0), mean_within(0.01, 6.9))
    assert filter_groups(rewards, both).tolist() == [False, True, False]


def test_bad_predicate_and_shape() -> None:
    with pytest.raises(InvalidInputError, match=r"\(P, G\)"):
        filter_groups(torch.zeros(4))
    with pytest.raises(InvalidInputError, match="bool tensor"):
        filter_groups(torch.zeros(2, 2), lambda r: r.mean(dim=1))


# EVisRAG's four channels (Eq. 8): observe/evidence = mean(perception, format), think/answer =
# mean(derivation, format). A reads the evidence right and answers wrong (perception 1,
# derivation 0, format 1), B the reverse: both totals are 2, the channels differ.
CHANNELS = ("observe", "evidence", "think", "answer")
A = RewardResult(2.0, scopes={"observe": 1.0, "evidence": 1.0, "think": 0.5, "answer": 0.5})
B = RewardResult(2.0, scopes={"observe": 0.5, "evidence": 0.5, "think": 1.0, "answer": 1.0})


def test_dapo_under_rs_grpo_keeps_equal_totals_with_differing_channels() -> None:
    """RS-GRPO normalises each channel in its group: A and B get advantages of opposite sign on
    every channel ((1 - 0.75) / 0.25 = +1 for A's evidence), so the group carries signal although
    its totals are equal."""
    assert sampling_rewards([[A, B]]).tolist() == [[2.0, 2.0]]
    assert DAPO_FILTER(sampling_rewards([[A, B]])).tolist() == [False]
    channels = sampling_rewards([[A, B], [A, A]], CHANNELS, per_scope=True)  # (P, G, K) = (2, 2, 4)
    assert tuple(channels.shape) == (2, 2, 4)
    assert filter_groups(channels, DAPO_FILTER).tolist() == [True, False]
    with pytest.raises(InvalidInputError, match=r"\(P, G\)"):
        mean_within(0.01, 6.9)(channels)  # the released band reads the overall reward only


@pytest.mark.parametrize(
    ("advantage", "keep_mean_range", "kept"),
    [("rs_grpo", (), 1), ("router", (), 1), ("grpo", (), 0), ("router", (0.01, 6.9), 1)],
)
def test_the_trainer_filters_rs_grpo_groups_on_their_channels(
    advantage: str, keep_mean_range: tuple[float, ...], kept: int
) -> None:
    """The trainer's own sampling loop: under RS-GRPO (or the router) the group of A and B is
    kept; under plain GRPO (totals only) it has no signal and is dropped; the released band reads
    the totals (mean 2 lies inside (0.01, 6.9))."""
    algo = AlgoConfig(
        advantage=advantage, dynamic_sampling=True, max_sampling_rounds=1, keep_mean_range=keep_mean_range
    )
    trainer = SimpleNamespace(
        cfg=SimpleNamespace(algo=algo),
        task=SimpleNamespace(scope_names=CHANNELS),
        local_batch=1,
        next_samples=lambda: [],
        _rollout=lambda samples: [([], [A, B])],
    )
    groups, sampled, stats = RLTrainer._collect(trainer)  # type: ignore[arg-type]
    assert len(groups) == kept and len(sampled) == 1 and stats["sampling/filtered_groups"] == 1 - kept
    # the reward the policy earned before the filter, logged whether the group was kept or not
    assert stats["sampling/reward_mean"] == pytest.approx((A.total + B.total) / 2)


class FakeGenerator:
    """Round r yields groups named f"r{r}g{i}" with the given (P, G) reward rows."""

    def __init__(self, rounds: list[list[list[float]]]) -> None:
        self.rounds, self.calls = rounds, []  # type: list[list[list[float]]], list[int]

    def __call__(self, round_index: int) -> Round[str]:
        self.calls.append(round_index)
        rows = self.rounds[round_index % len(self.rounds)]
        return Round([f"r{round_index}g{i}" for i in range(len(rows))], torch.tensor(rows))


def test_dynamic_sampler_accumulates_until_full_and_truncates() -> None:
    # round 0 keeps g1, g3 (2 of 4); round 1 keeps g0, g2 -> 4 kept, batch of 3, surplus 1
    gen = FakeGenerator(
        [
            [[1.0, 1.0], [0.0, 1.0], [0.0, 0.0], [1.0, 0.0]],
            [[0.0, 1.0], [1.0, 1.0], [1.0, 0.0], [0.0, 0.0]],
        ]
    )
    result = DynamicSampler[str](3, max_rounds=5).collect(gen)
    assert result.groups == ["r0g1", "r0g3", "r1g0"]
    assert (result.rounds, result.generated, result.filtered, result.surplus) == (2, 8, 4, 1)
    assert result.full and result.per_round_kept == [2, 2] and gen.calls == [0, 1]


def test_dynamic_sampler_stops_at_max_rounds() -> None:
    gen = FakeGenerator([[[1.0, 1.0], [0.0, 1.0]]])  # one useful group per round
    with pytest.raises(DynamicSamplingError, match="only 2 of 5 groups") as info:
        DynamicSampler[str](5, max_rounds=2).collect(gen)
    assert isinstance(info.value, EvidraError)
    partial = DynamicSampler[str](5, max_rounds=2, on_short="partial").collect(
        FakeGenerator([[[1.0, 1.0], [0.0, 1.0]]])
    )
    assert partial.groups == ["r0g1", "r1g1"] and not partial.full and partial.filtered == 2


def test_dynamic_sampler_checks_its_inputs() -> None:
    with pytest.raises(InvalidInputError, match=">= 1"):
        DynamicSampler[str](0)
    with pytest.raises(InvalidInputError, match="on_short"):
        DynamicSampler[str](1, on_short="drop")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="2 groups but rewards for 1"):
        DynamicSampler[str](1).collect(lambda r: Round(["a", "b"], torch.tensor([[0.0, 1.0]])))


def test_difficulty_filter_drops_solved_and_orders_a_curriculum() -> None:
    # k = 8: "a" solved 8/8 is dropped (EVisRAG drops perfect scores); easy first: c (6), b (3), d (0)
    sel = difficulty_filter({"a": 8, "b": 3, "c": 6, "d": 0}, 8)
    assert sel.kept == ["b", "c", "d"] and sel.curriculum == ["c", "b", "d"]
    assert sel.dropped_easy == ["a"] and sel.dropped_hard == []
    hard = difficulty_filter({"a": 8, "b": 3, "c": 6, "d": 0}, 8, min_success=1, order="hard_first")
    assert hard.curriculum == ["b", "c"] and hard.dropped_hard == ["d"]
    ties = difficulty_filter({"x": 2, "y": 2, "z": 5}, 8)
    assert ties.curriculum == ["z", "x", "y"]


def test_difficulty_filter_errors() -> None:
    with pytest.raises(InvalidInputError, match=r"\[0, 8\]"):
        difficulty_filter({"a": 9}, 8)
    with pytest.raises(InvalidInputError, match="nothing would be kept"):
        difficulty_filter({"a": 1}, 8, min_success=5, max_success=2)
    with pytest.raises(InvalidInputError, match="k \\(completions"):
        difficulty_filter({"a": 0}, 0)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 6), st.integers(1, 4))
def test_dynamic_sampler_accounting(seed: int, batch: int, rounds: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    tables = [torch.randint(0, 2, (3, 4), generator=gen).float().tolist() for _ in range(rounds)]
    result = DynamicSampler[str](batch, max_rounds=rounds, on_short="partial").collect(FakeGenerator(tables))
    kept_total = sum(result.per_round_kept)
    assert result.generated == 3 * result.rounds and result.filtered + kept_total == result.generated
    assert len(result.groups) == min(batch, kept_total) and result.full == (kept_total >= batch)
    assert result.surplus == max(0, kept_total - batch)
    for name in result.groups:  # every kept group has rewards that are not all equal
        r, i = int(name[1 : name.index("g")]), int(name[name.index("g") + 1 :])
        assert len(set(tables[r][i])) > 1
