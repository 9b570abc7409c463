"""The registered advantage estimators: one input record in, one output record out."""

from __future__ import annotations

import inspect

import pytest
import torch

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.types import Span
from evidra.rl.algo.estimators import ADVANTAGES, AdvantageInputs, Advantages

S3 = (1.0 / 3.0) ** 0.5  # unbiased std of [1, 0, 1, 0]


def test_every_estimator_takes_the_one_record() -> None:
    assert set(ADVANTAGES) == {"dr_grpo", "grpo", "router", "rs_grpo", "spo", "turn_credit"}
    for name in ADVANTAGES:
        params = list(inspect.signature(ADVANTAGES.get(name).fn).parameters.values())
        assert len(params) == 1 and params[0].annotation in ("AdvantageInputs", AdvantageInputs), name


def test_grpo_spreads_one_value_per_rollout_over_tokens() -> None:
    # mean 0.5, unbiased std sqrt(1/3): A = ±0.5 / (0.57735 + 1e-6) = ±0.866024
    out = ADVANTAGES.get("grpo").fn(AdvantageInputs(torch.tensor([1.0, 0.0, 1.0, 0.0]), 4))
    a = 0.5 / (S3 + 1e-6)
    assert torch.allclose(out.to_tokens(3), torch.tensor([[a] * 3, [-a] * 3, [a] * 3, [-a] * 3]))


def test_dr_grpo_ignores_scale_by_std() -> None:
    out = ADVANTAGES.get("dr_grpo").fn(AdvantageInputs(torch.tensor([1.0, 0.0, 0.0, 0.0]), 4))
    assert out.sequence is not None and out.sequence.tolist() == [0.75, -0.25, -0.25, -0.25]


def test_grpo_estimators_hand_on_every_grouping_option() -> None:
    # groups by index: "a" = rollouts 0, 2 (rewards 1, 0); "b" = rollout 1 alone once rollout 3 is
    # invalid, so it gets 0 (singleton="zero"). Group "a": mean 0.5, biased std 0.5, so GRPO gives
    # ±0.5 / (0.5 + eps 1.5) = ±0.25 and Dr.GRPO ±0.5 (the unbiased std, 0.7071, would give ±0.2265)
    x = AdvantageInputs(
        torch.tensor([1.0, 3.0, 0.0, 5.0]),
        index=["a", "b", "a", "b"],
        valid=torch.tensor([True, True, True, False]),
        eps=1.5,
        std="biased",
        singleton="zero",
    )
    grpo = ADVANTAGES.get("grpo").fn(x).sequence
    dr_grpo = ADVANTAGES.get("dr_grpo").fn(x).sequence
    assert grpo is not None and torch.allclose(grpo, torch.tensor([0.25, 0.0, -0.25, 0.0]))
    assert dr_grpo is not None and torch.allclose(dr_grpo, torch.tensor([0.5, 0.0, -0.5, 0.0]))


def test_scoped_estimators_read_the_channels() -> None:
    # two rollouts in one group, channel 0 on tokens [0, 2), channel 1 on [1, 3)
    rewards = torch.tensor([[1.0, 0.0], [0.0, 0.0]])  # (2, K=2)
    masks = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 1.0, 1.0]]] * 2)  # (2, 2, 3)
    x = AdvantageInputs(
        torch.zeros(2), 2, scale_by_std=False, length=3, scope_rewards=rewards, scope_masks=masks
    )
    # RS-GRPO: token 0 has channel 0 (rewards 1, 0 -> ±0.5), token 1 both (means 0.5, 0 -> ±0.25),
    # token 2 channel 1 (0, 0 -> 0)
    tokens = ADVANTAGES.get("rs_grpo").fn(x).to_tokens(3)
    assert torch.equal(tokens, torch.tensor([[0.5, 0.25, 0.0], [-0.5, -0.25, 0.0]]))
    scoped = ADVANTAGES.get("router").fn(x).scoped
    assert scoped is not None
    assert torch.equal(scoped.values[:, 0], torch.tensor([[0.5, 0.5, 0.0], [-0.5, -0.5, 0.0]]))
    assert torch.equal(scoped.values[:, 1], torch.zeros(2, 3))
    assert ADVANTAGES.get("router").per_scope_loss and ADVANTAGES.get("rs_grpo").needs_scopes


def test_turn_credit_reads_turn_credits() -> None:
    # trajectory sums 3 and 1 -> Dr.GRPO ±1 on every turn token
    x = AdvantageInputs(
        torch.zeros(2),
        2,
        scale_by_std=False,
        length=4,
        turn_credits=torch.tensor([[1.0, 2.0], [1.0, 0.0]]),
        turn_mask=torch.ones(2, 2),
        turn_spans=[[Span(0, 1), Span(2, 3)], [Span(0, 2)]],
    )
    tokens = ADVANTAGES.get("turn_credit").fn(x).to_tokens(4)
    assert torch.equal(tokens, torch.tensor([[1.0, 0.0, 1.0, 0.0], [-1.0, -1.0, 0.0, 0.0]]))


def test_missing_inputs_and_ambiguous_outputs_are_errors() -> None:
    x = AdvantageInputs(torch.zeros(2), 2)
    with pytest.raises(ConfigError, match="advantage router needs a task with scope names"):
        ADVANTAGES.get("router").fn(x)
    with pytest.raises(ConfigError, match="turn_credit needs per-turn credits"):
        ADVANTAGES.get("turn_credit").fn(x)
    with pytest.raises(InvalidInputError, match="exactly one"):
        Advantages(sequence=torch.zeros(2), tokens=torch.zeros(2, 1))
