"""DAPO dynamic sampling and difficulty filtering, with a fake generator."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.data.construction.difficulty import difficulty_filter
from evidra.rl.algo.filtering import (
    DAPO_FILTER,
    EVISRAG_FILTER,
    DynamicSampler,
    DynamicSamplingError,
    Round,
    all_of,
    filter_groups,
    mean_within,
    std_above,
)


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
