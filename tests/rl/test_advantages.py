"""Advantage estimators: hand-computed values, EVisRAG conformance replay, properties."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.core.types import Span
from evidra.rl.algo.advantages import (
    dr_grpo,
    group_ids,
    grpo,
    router_advantages,
    rs_grpo_advantages,
    scope_masks_from_spans,
    scoped_token_advantages,
    spans_to_mask,
    turn_credit_advantages,
    turn_masks,
)
from evidra.rl.algo.estimators import ADVANTAGES, AdvantageInputs

S3 = math.sqrt(1.0 / 3.0)  # unbiased std of [1, 0, 1, 0]: sqrt(4 * 0.25 / 3)


def _conformance(name: str) -> dict[str, Any]:
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "conformance"
    data: dict[str, Any] = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    return data


# --- GRPO / Dr.GRPO -------------------------------------------------------------------------


def test_grpo_hand_computed_unbiased() -> None:
    # mean 0.5, unbiased std sqrt(1/3) = 0.57735; A = ±0.5 / (0.57735 + 1e-6) = ±0.866024
    got = grpo(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4)
    a = 0.5 / (S3 + 1e-6)
    assert torch.allclose(got, torch.tensor([a, -a, a, -a]), atol=1e-6)


def test_grpo_biased_std_and_trl_eps() -> None:
    # biased std of [1, 0, 1, 0] is 0.5: A = ±0.5 / (0.5 + 1e-6); TRL's eps 1e-4 with unbiased std
    r = torch.tensor([1.0, 0.0, 1.0, 0.0])
    biased = grpo(r, 4, std="biased")
    assert torch.allclose(biased[:2], torch.tensor([0.5 / 0.500001, -0.5 / 0.500001]), atol=1e-6)
    trl = grpo(r, 4, eps=1e-4)
    assert trl[0].item() == pytest.approx(0.5 / (S3 + 1e-4), rel=1e-6)


def test_grpo_contiguous_groups_and_identical_group() -> None:
    # group 1 [1, 2, 3]: mean 2, std 1 -> [-1, 0, 1] / (1 + 1e-6); group 2 all equal -> 0
    got = grpo(torch.tensor([1.0, 2.0, 3.0, 10.0, 10.0, 10.0]), 3)
    e = 1.0 / (1.0 + 1e-6)
    assert torch.allclose(got, torch.tensor([-e, 0.0, e, 0.0, 0.0, 0.0]), atol=1e-7)


def test_dr_grpo_is_mean_centred_only() -> None:
    # mean 0.25 -> [0.75, -0.25, -0.25, -0.25]
    got = dr_grpo(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4)
    assert torch.allclose(got, torch.tensor([0.75, -0.25, -0.25, -0.25]))
    assert torch.equal(got, grpo(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4, scale_by_std=False))


def test_index_groups_equal_contiguous_groups() -> None:
    r = torch.tensor([0.3, 0.9, 0.1, 0.5, 0.7, 0.2])
    contiguous = grpo(r, 3)
    perm = [3, 0, 4, 1, 5, 2]
    shuffled = grpo(r[perm], index=[["p", "q"][i // 3] for i in perm])
    assert torch.equal(shuffled, contiguous[perm])


def test_singleton_group_raises_or_zero() -> None:
    with pytest.raises(InvalidInputError, match="one valid rollout"):
        grpo(torch.tensor([1.0, 2.0]), 1)
    assert torch.equal(grpo(torch.tensor([1.0, 2.0]), 1, singleton="zero"), torch.zeros(2))


def test_unscored_rollouts_get_zero_and_leave_the_statistics() -> None:
    # valid rows 0, 1, 3: [1, 0, 1] -> mean 2/3, deviations 1/3, -2/3, 1/3;
    # unbiased var (1/9 + 4/9 + 1/9) / 2 = 1/3 -> std 0.57735; A = dev / (0.57735 + 1e-6)
    got = grpo(torch.tensor([1.0, 0.0, 5.0, 1.0]), 4, valid=torch.tensor([True, True, False, True]))
    s = S3 + 1e-6
    assert torch.allclose(got, torch.tensor([1 / 3 / s, -2 / 3 / s, 0.0, 1 / 3 / s]), atol=1e-6)


def test_nan_reward_is_unscored_unless_marked_valid() -> None:
    r = torch.tensor([1.0, 0.0, float("nan"), 1.0])
    assert torch.equal(grpo(r, 4), grpo(r.nan_to_num(5.0), 4, valid=torch.tensor([1, 1, 0, 1])))
    with pytest.raises(InvalidInputError, match=r"\[2\] are marked valid"):
        grpo(r, 4, valid=torch.ones(4, dtype=torch.bool))


def test_bad_group_arguments_are_named() -> None:
    with pytest.raises(InvalidInputError, match="do not split into groups of 3"):
        grpo(torch.zeros(4), 3)
    with pytest.raises(InvalidInputError, match="index has 2 group ids for 4"):
        grpo(torch.zeros(4), index=["a", "b"])
    with pytest.raises(InvalidInputError, match="1-D"):
        grpo(torch.zeros(2, 2), 2)
    with pytest.raises(InvalidInputError, match="std must be"):
        grpo(torch.zeros(4), 2, std="sample")


def test_registry_lookup_and_typo() -> None:
    r = torch.tensor([1.0, 0.0, 0.0, 0.0])
    assert torch.equal(ADVANTAGES.get("grpo").fn(AdvantageInputs(r, 4)).sequence, grpo(r, 4))
    assert torch.equal(ADVANTAGES.get("dr_grpo").fn(AdvantageInputs(r, 4)).sequence, dr_grpo(r, 4))
    with pytest.raises(RegistryError, match="did you mean 'grpo'"):
        ADVANTAGES.get("grpoo")


def test_group_ids_first_appearance() -> None:
    assert group_ids(5, index=torch.tensor([7, 3, 7, 9, 3])).tolist() == [0, 1, 0, 2, 1]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-50, 50, allow_nan=False), min_size=6, max_size=6),
    st.floats(0.5, 20.0),
    st.floats(-10.0, 10.0),
)
def test_grpo_groups_sum_to_zero_and_ignore_affine_maps(values: list[float], a: float, b: float) -> None:
    r = torch.tensor(values, dtype=torch.float64)
    adv = grpo(r, 3, eps=0.0, singleton="zero")
    if float(r[:3].std()) > 1e-3 and float(r[3:].std()) > 1e-3:
        assert abs(float(adv[:3].sum())) < 1e-9 and abs(float(adv[3:].sum())) < 1e-9
        assert torch.allclose(grpo(a * r + b, 3, eps=0.0), adv, atol=1e-8)


# --- EVisRAG conformance ------------------------------------------------------------------


def test_replay_evisrag_grpo_advantage_bit_exact() -> None:
    data = _conformance("evisrag_grpo_advantage")
    for case in data["cases"]:
        rewards, index = case["args"]
        scores = torch.tensor(rewards, dtype=torch.float32)[:, 0]  # harness: (bs, 1) -> sum_t
        got = grpo(scores, index=index)
        assert torch.equal(got, torch.tensor(case["output"], dtype=torch.float32)), case


def test_replay_evisrag_router_advantage_bit_exact() -> None:
    data = _conformance("evisrag_router_advantage")
    for case in data["cases"]:
        rewards, index = case["args"]
        r = torch.tensor(rewards, dtype=torch.float32)
        if "exception" in case:  # upstream: AssertionError("GRPO needs rollout.n > 1.")
            assert case["exception"]["type"] == "AssertionError"
            with pytest.raises(InvalidInputError, match="no baseline"):
                router_advantages(r, index=index)
            assert torch.equal(router_advantages(r, index=index, singleton="zero"), torch.zeros_like(r))
            continue
        got = router_advantages(r, index=index)
        assert torch.equal(got, torch.tensor(case["output"], dtype=torch.float32)), case.get("note")


# --- RS-GRPO scoped advantages ------------------------------------------------------------

# channels (perception, derivation, format); tokens 0-1 observe/evidence, 2-3 think/answer (Eq. 7)
EQ7_MASKS = torch.tensor([[1, 1, 0, 0], [0, 0, 1, 1], [1, 1, 1, 1]], dtype=torch.float32)


def test_rs_grpo_paper_eq7_to_9_hand_computed() -> None:
    # sample 0: p=1, d=0, f=1; sample 1: p=0, d=1, f=1 (one group of 2)
    # tokens 0-1: R̄ = mean(p, f) = 1.0 and 0.5 -> mean 0.75, unbiased std 0.25*sqrt(2) = 0.353553
    #   -> A = ±0.25 / 0.353554 = ±0.707105
    # tokens 2-3: R̄ = mean(d, f) = 0.5 and 1.0 -> A = ∓0.707105
    rewards = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    masks = EQ7_MASKS.expand(2, 3, 4)
    got = rs_grpo_advantages(rewards, masks, 2)
    a = 0.25 / (0.25 * math.sqrt(2) + 1e-6)
    assert torch.allclose(got, torch.tensor([[a, a, -a, -a], [-a, -a, a, a]]), atol=1e-6)


def test_rs_grpo_matches_eq8_token_rewards_then_per_token_normalisation() -> None:
    from evidra.rewards.scopes import token_rewards

    spans = {"observe": Span(0, 1), "evidence": Span(1, 2), "think": Span(2, 3), "answer": Span(3, 4)}
    names = ("perception", "derivation", "format")
    rewards = torch.tensor([[0.2, 0.9, 1.0], [0.7, 0.1, 0.0], [0.4, 0.4, 1.0]])
    eq8 = torch.tensor(
        [token_rewards(4, spans, dict(zip(names, row.tolist(), strict=True))) for row in rewards]
    )  # (3, 4) R̄_t per rollout
    expected = (eq8 - eq8.mean(0)) / (eq8.std(0) + 1e-6)  # Eq. 9 per token over the group
    got = rs_grpo_advantages(rewards, EQ7_MASKS.expand(3, 3, 4), 3)
    assert torch.allclose(got, expected, atol=1e-6)


def test_rs_grpo_uncovered_tokens_and_invalid_rollouts_are_zero() -> None:
    masks = torch.zeros(3, 2, 3)
    masks[:, 0, :2] = 1  # token 2 covered by no channel
    got = rs_grpo_advantages(
        torch.tensor([[1.0, 0.0], [0.0, 0.0], [9.0, 9.0]]), masks, 3, valid=torch.tensor([1, 1, 0])
    )
    assert torch.equal(got[:, 2], torch.zeros(3)) and torch.equal(got[2], torch.zeros(3))
    assert got[0, 0] > 0 > got[1, 0]


def test_scoped_token_advantages_sum_and_mean() -> None:
    # A = [1, -2]; scope 0 on tokens 0-1, scope 1 on tokens 1-2
    # sum: [1, 1 - 2, -2] = [1, -1, -2]; mean: [1, -0.5, -2]
    adv = torch.tensor([[1.0, -2.0]])
    masks = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]])
    assert torch.equal(scoped_token_advantages(adv, masks), torch.tensor([[1.0, -1.0, -2.0]]))
    assert torch.equal(scoped_token_advantages(adv, masks, combine="mean"), torch.tensor([[1.0, -0.5, -2.0]]))
    with pytest.raises(InvalidInputError, match="scope_masks must be"):
        scoped_token_advantages(adv, masks[:, :1])


# --- CAVE per-turn credits ----------------------------------------------------------------

TURN_VALUES = torch.tensor([[1.0, 2.0], [4.0, 0.0]])
TURN_MASK = torch.tensor([[1, 1], [1, 0]])
TURN_SPANS = [[Span(0, 2), Span(3, 5)], [Span(0, 3)]]


def test_turn_credit_trajectory_default() -> None:
    # trajectory credits 3 and 4: mean 3.5, std 0.5*sqrt(2) = 0.707107 -> A = ∓0.707106
    got = turn_credit_advantages(TURN_VALUES, TURN_MASK, TURN_SPANS, 6, 2)
    a = 0.5 / (0.5 * math.sqrt(2) + 1e-6)
    assert torch.allclose(got[0], torch.tensor([-a, -a, 0.0, -a, -a, 0.0]), atol=1e-6)
    assert torch.allclose(got[1], torch.tensor([a, a, a, 0.0, 0.0, 0.0]), atol=1e-6)


def test_turn_credit_per_turn_index() -> None:
    # turn 0: [1, 4] -> ∓0.707106; turn 1 reached by one rollout only -> 0 (singleton="zero")
    got = turn_credit_advantages(TURN_VALUES, TURN_MASK, TURN_SPANS, 6, 2, normalize="turn_index")
    a = 0.5 / (0.5 * math.sqrt(2) + 1e-6)
    assert torch.allclose(got[0], torch.tensor([-a, -a, 0.0, 0.0, 0.0, 0.0]), atol=1e-6)
    assert torch.allclose(got[1], torch.tensor([a, a, a, 0.0, 0.0, 0.0]), atol=1e-6)


def test_turn_credit_pooled_over_group_turns_and_none() -> None:
    # pooled [1, 2, 4]: mean 7/3, unbiased var (16 + 1 + 25) / 9 / 2 = 7/3 -> std 1.527525
    # -> [-0.872872, -0.218218, 1.091089]
    got = turn_credit_advantages(TURN_VALUES, TURN_MASK, TURN_SPANS, 6, 2, normalize="group_turns")
    s = math.sqrt(7 / 3) + 1e-6
    first, second, third = (1 - 7 / 3) / s, (2 - 7 / 3) / s, (4 - 7 / 3) / s
    assert torch.allclose(got[0], torch.tensor([first, first, 0.0, second, second, 0.0]), atol=1e-6)
    assert torch.allclose(got[1], torch.tensor([third, third, third, 0.0, 0.0, 0.0]), atol=1e-6)
    raw = turn_credit_advantages(TURN_VALUES, TURN_MASK, TURN_SPANS, 6, 2, normalize="none")
    assert torch.equal(raw, torch.tensor([[1.0, 1, 0, 2, 2, 0], [4.0, 4, 4, 0, 0, 0]]))


def test_turn_credit_invalid_rollout_and_bad_mode() -> None:
    got = turn_credit_advantages(
        TURN_VALUES, TURN_MASK, TURN_SPANS, 6, 2, normalize="none", valid=torch.tensor([True, False])
    )
    assert torch.equal(got[1], torch.zeros(6))
    with pytest.raises(InvalidInputError, match="normalize must be"):
        turn_credit_advantages(TURN_VALUES, TURN_MASK, TURN_SPANS, 6, 2, normalize="step")


# --- masks ----------------------------------------------------------------------------------


def test_span_masks() -> None:
    assert spans_to_mask([[Span(1, 3)], [Span(0, 1), Span(3, 4)]], 4).tolist() == [
        [0, 1, 1, 0],
        [1, 0, 0, 1],
    ]
    with pytest.raises(InvalidInputError, match="exceeds length 3"):
        spans_to_mask([[Span(1, 4)]], 3)
    assert turn_masks([[Span(0, 1)], []], 2, 2).tolist() == [[[1, 0], [0, 0]], [[0, 0], [0, 0]]]
    with pytest.raises(InvalidInputError, match="raise t_max"):
        turn_masks([[Span(0, 1), Span(1, 2)]], 1, 2)


def test_scope_masks_from_spans_times_policy_mask() -> None:
    scopes = [{"a": (Span(0, 3),), "b": (Span(3, 4),)}, {"a": (Span(1, 2),)}]
    policy = torch.tensor([[1, 0, 1, 1], [1, 1, 1, 1]])
    got = scope_masks_from_spans(scopes, ["a", "b"], 4, policy_mask=policy)
    assert got.tolist() == [[[1, 0, 1, 0], [0, 0, 0, 1]], [[0, 1, 0, 0], [0, 0, 0, 0]]]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(1, 4), st.integers(2, 5), st.integers(1, 6))
def test_single_channel_scoped_estimators_reduce_to_grpo(seed: int, p: int, g: int, length: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    rewards = torch.randint(0, 3, (p * g, 1), generator=gen).to(torch.float32)
    mask = (torch.rand(p * g, 1, length, generator=gen) < 0.7).to(torch.float32)
    plain = grpo(rewards[:, 0], g)  # (P*G,)
    # other functions than grpo: advantages of |a| <= ~2 within fp32 rounding of another path
    torch.testing.assert_close(router_advantages(rewards, g)[:, 0], plain, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        rs_grpo_advantages(rewards, mask, g), plain[:, None] * mask[:, 0], rtol=0, atol=1e-6
    )
    torch.testing.assert_close(
        scoped_token_advantages(plain[:, None], mask), plain[:, None] * mask[:, 0], rtol=0, atol=1e-6
    )
