"""MM-Doc-R1's similarity-weighted baseline (``spo``) and its turn similarities, hand-computed."""

from __future__ import annotations

import pytest
import torch

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import Action, Parsed, Sample, Span, Trajectory
from evidra.env.environment import StepInfo
from evidra.models.context import Context
from evidra.rl.algo.advantages import grpo, similarity_baseline_advantages
from evidra.rl.algo.credit import prefix_similarity, turn_states
from evidra.rl.algo.estimators import ADVANTAGES, AdvantageInputs
from evidra.rollout import Episode

TWO_TURNS = [[Span(0, 1), Span(2, 3)]] * 3  # each rollout: turn 0 on token 0, turn 1 on token 2


def _similarity() -> torch.Tensor:
    # turn 0: the initial state, all alike; turn 1: rollouts 0 and 1 took the same first action
    sim = torch.ones(3, 3, 2)  # (N, N, T)
    sim[:, :, 1] = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    return sim


def test_spo_hand_computed_without_std() -> None:
    # rewards (1, 0, 0). Turn 0: baseline = group mean 1/3 -> (2/3, -1/3, -1/3).
    # Turn 1: rollout 0's baseline (1*1 + 1*0) / 2 = 0.5 -> +0.5; rollout 1's the same -> -0.5;
    # rollout 2 resembles only itself: baseline 0 -> 0.
    out = similarity_baseline_advantages(
        torch.tensor([1.0, 0.0, 0.0]), _similarity(), torch.ones(3, 2), TWO_TURNS, 4, 3, scale_by_std=False
    )
    third = 1.0 / 3.0
    expected = torch.tensor([[2 * third, 0.0, 0.5, 0.0], [-third, 0.0, -0.5, 0.0], [-third, 0.0, 0.0, 0.0]])
    assert torch.allclose(out, expected)


def test_spo_divides_by_the_group_std() -> None:
    # std of (1, 0, 0), unbiased: sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.57735
    out = similarity_baseline_advantages(
        torch.tensor([1.0, 0.0, 0.0]), _similarity(), torch.ones(3, 2), TWO_TURNS, 4, 3
    )
    s = (1.0 / 3.0) ** 0.5 + 1e-6
    assert out[0, 2].item() == pytest.approx(0.5 / s, rel=1e-5)
    assert out[1, 0].item() == pytest.approx(-1.0 / 3.0 / s, rel=1e-5)


def test_spo_fractional_similarity_weights_the_baseline() -> None:
    # rewards (1, 0), similarity 0.5: b_0 = (1 + 0.5*0) / 1.5 = 2/3 -> 1/3; b_1 = (0.5*1 + 0) / 1.5 -> -1/3
    sim = torch.tensor([[1.0, 0.5], [0.5, 1.0]])[:, :, None]  # (2, 2, 1)
    out = similarity_baseline_advantages(
        torch.tensor([1.0, 0.0]), sim, torch.ones(2, 1), [[Span(0, 2)]] * 2, 2, 2, scale_by_std=False
    )
    assert torch.allclose(out, torch.tensor([[1 / 3, 1 / 3], [-1 / 3, -1 / 3]]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spo_single_turn_with_one_state_is_grpo(seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.rand(8, generator=gen)  # two groups of 4
    sim = torch.ones(8, 8, 1)  # the initial state: every rollout alike (other groups are masked)
    out = similarity_baseline_advantages(rewards, sim, torch.ones(8, 1), [[Span(0, 3)]] * 8, 3, 4)
    assert torch.allclose(out, grpo(rewards, 4)[:, None].expand(8, 3), atol=1e-6)


def test_spo_invalid_rollouts_leave_the_baseline_and_singletons() -> None:
    sim = torch.ones(3, 3, 1)
    valid = torch.tensor([True, True, False])
    # the invalid reward 5 is left out: baseline 0.5 -> (0.5, -0.5, 0)
    out = similarity_baseline_advantages(
        torch.tensor([1.0, 0.0, 5.0]),
        sim,
        torch.ones(3, 1),
        [[Span(0, 1)]] * 3,
        1,
        3,
        valid=valid,
        scale_by_std=False,
    )
    assert out.flatten().tolist() == [0.5, -0.5, 0.0]
    alone = torch.tensor([True, False, False])
    with pytest.raises(InvalidInputError, match="alone in their group"):
        similarity_baseline_advantages(
            torch.ones(3), sim, torch.ones(3, 1), [[Span(0, 1)]] * 3, 1, 3, valid=alone, singleton="raise"
        )
    zero = similarity_baseline_advantages(
        torch.ones(3), sim, torch.ones(3, 1), [[Span(0, 1)]] * 3, 1, 3, valid=alone
    )
    assert not zero.any()
    with pytest.raises(InvalidInputError, match="similarity"):
        similarity_baseline_advantages(torch.ones(3), torch.ones(3, 3), torch.ones(3, 1), [[]] * 3, 1, 3)


def test_spo_is_registered_and_needs_similarity() -> None:
    est = ADVANTAGES.get("spo")
    assert est.needs_similarity and not est.needs_scopes
    with pytest.raises(ConfigError, match="similarities"):
        est.fn(AdvantageInputs(torch.ones(2), 2))
    x = AdvantageInputs(
        torch.tensor([1.0, 0.0]),
        2,
        scale_by_std=False,
        length=2,
        turn_mask=torch.ones(2, 1),
        turn_spans=[[Span(0, 2)]] * 2,
        similarity=torch.ones(2, 2, 1),
    )
    assert torch.allclose(est.fn(x).to_tokens(2), torch.tensor([[0.5, 0.5], [-0.5, -0.5]]))


def test_prefix_similarity_is_jaccard_of_the_actions_so_far() -> None:
    a = [frozenset({"search:revenue", "search:2021"}), frozenset({"fetch:3"})]
    b = [frozenset({"search:revenue"}), frozenset({"answer:10"})]
    c = [frozenset({"search:revenue"})]
    sim = prefix_similarity([a, b, c], [0, 0, 1], 3)
    # before turn 0 all alike; before turn 1 |{revenue}| / |{revenue, 2021}| = 1/2; before turn 2
    # {revenue, 2021, fetch:3} vs {revenue, answer:10}: 1/4. Other groups: 0.
    assert sim[0, 1].tolist() == [1.0, 0.5, 0.25]
    assert sim[0, 0].tolist() == [1.0, 1.0, 1.0] and sim[0, 2].tolist() == [0.0, 0.0, 0.0]


def _episode(parsed: tuple[Parsed | None, ...], infos: tuple[StepInfo, ...]) -> Episode:
    turns = tuple(Span(i, i + 1) for i in range(len(infos)))
    traj = Trajectory(
        (), tuple(range(len(infos))), (1,) * len(infos), (0.0,) * len(infos), turns, ("t",) * len(infos)
    )
    return Episode(Sample(id="s", question="q"), 0, traj, Context(()), infos, parsed)


def test_turn_states_read_the_parsed_actions() -> None:
    search = Parsed(text="", action=Action("search", "Revenue, 2021!"))
    ep = _episode(
        (search, None, Parsed(text="")), (StepInfo("search"), StepInfo("fetch"), StepInfo("invalid"))
    )
    assert turn_states(ep) == [
        frozenset({"search:revenue", "search:2021"}),
        frozenset({"fetch:"}),
        frozenset({"invalid:"}),
    ]
