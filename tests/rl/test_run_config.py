"""The rollout settings of a recipe (``evidra.rl.run_config.RolloutConfig``) as the sampling of
each turn: one construction that training and data construction both use."""

from __future__ import annotations

import pytest

from evidra.core.errors import InvalidInputError
from evidra.models.sampling import SamplingParams
from evidra.rl.run_config import RolloutConfig


def test_rollout_settings_give_each_turns_sampling_params() -> None:
    rollout = RolloutConfig(temperature=0.7, top_p=0.9, top_k=5, max_new_tokens=32, min_new_tokens=4)
    expected = SamplingParams(max_new_tokens=32, temperature=0.7, top_p=0.9, top_k=5, min_new_tokens=4)
    assert rollout.sampling() == expected
    assert (rollout.sampling().stop, rollout.sampling().seed) == ((), None)  # the environment stops turns


def test_the_turn_budget_of_sampling_and_limits_is_the_same_setting() -> None:
    rollout = RolloutConfig(max_new_tokens=48, max_turns=3)
    assert rollout.sampling().max_new_tokens == rollout.limits().max_new_tokens == 48


def test_a_sampling_setting_out_of_range_is_one_error_naming_it() -> None:
    with pytest.raises(InvalidInputError, match="top_p must be in"):
        RolloutConfig(top_p=0.0).sampling()
