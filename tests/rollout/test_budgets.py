"""Token budgets of an episode: observations count against the response budget by default, and
against a separate context cap with ``max_context_tokens`` (VRAG-RL's prompt + response split).

The policy is scripted (every turn writes the same few tokens) and every observation is one
large image, so each limit can be computed by hand from the measured prompt, turn and
observation lengths.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message, Sample, TextPart
from evidra.env import StepResult
from evidra.env.environment import StepInfo
from evidra.models.context import Context, encode_turn
from evidra.models.generation import Generation, SamplingParams
from evidra.rollout import RolloutLimits, rollout

TURN = "<search>page</search>"
IMAGE = Image.new("RGB", (280, 280), (30, 140, 200))  # large next to a turn of a few tokens


class _Script:
    """A backend whose policy writes ``TURN`` every turn (stopped on its stop string)."""

    def __init__(self, vlm: Any) -> None:
        self.vlm = vlm
        self.ids = tuple(vlm.tokenizer(TURN, add_special_tokens=False)["input_ids"])

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        return [Generation(c.token_ids, self.ids, (0.0,) * len(self.ids), TURN, "stop") for c in contexts]


class _ImageEnv:
    """Every action is answered with one large image; the episode never ends by itself."""

    stop = ("</search>",)

    def reset(self, sample: Sample) -> list[Message]:
        return [Message.text("user", sample.question)]

    def step(self, text: str) -> StepResult:
        obs = Message("user", (TextPart("<information>"), ImagePart(IMAGE), TextPart("</information>")))
        return StepResult((obs,), False, StepInfo(action="search"))


def _run(vlm: Any, limits: RolloutLimits) -> Any:
    (ep,) = rollout(
        _Script(vlm),
        lambda s: _ImageEnv(),
        [Sample(id="q", question="Find it.")],
        1,
        SamplingParams(max_new_tokens=32),
        limits,
    )
    return ep


@pytest.fixture(scope="module")
def sizes(tiny_vlms: dict[str, Any]) -> tuple[Any, int, int, int]:
    """(vlm, prompt tokens, tokens of one policy turn, tokens of one observation)."""
    vlm = tiny_vlms["qwen2_5_vl"]
    one = _run(vlm, RolloutLimits(max_turns=1, max_new_tokens=32, max_response_tokens=64))
    obs = encode_turn(vlm.processor, _ImageEnv().step(TURN).observation, close_previous=True)
    # the tiny model's max_pixels 50176 = 224 x 224: 8 x 8 merged 28-px patches = 64 image tokens
    assert obs.token_ids.count(vlm.image_token_id) == 64
    return vlm, len(one.trajectory.prompt_ids), len(one.trajectory.token_ids), len(obs)


def test_by_default_an_image_observation_spends_the_response_budget(sizes: tuple[Any, int, int, int]) -> None:
    vlm, _, turn, obs = sizes
    budget = 2 * turn + 10  # room for the policy's turns, not for one image
    assert obs > budget
    ep = _run(vlm, RolloutLimits(max_turns=4, max_new_tokens=32, max_response_tokens=budget))
    assert ep.trajectory.num_turns == 1 and ep.trajectory.truncated  # the image did not fit


def test_with_a_context_cap_images_do_not_spend_the_policy_budget(sizes: tuple[Any, int, int, int]) -> None:
    vlm, prompt, turn, obs = sizes
    budget = 2 * turn + 10
    roomy = RolloutLimits(
        max_turns=4,
        max_new_tokens=32,
        max_response_tokens=5 * turn,
        max_context_tokens=prompt + 4 * turn + 3 * obs + 1,
    )
    ep = _run(vlm, roomy)
    t = ep.trajectory
    assert t.num_turns == 4 and t.num_policy_tokens == 4 * turn  # ended by the turn limit only
    assert len(t.token_ids) == 4 * turn + 3 * obs > roomy.max_response_tokens
    assert ep.context.num_images == 3
    # the context cap does truncate: turn 2's observation would leave no room for a third turn
    capped = RolloutLimits(
        max_turns=4,
        max_new_tokens=32,
        max_response_tokens=budget,
        max_context_tokens=prompt + 2 * turn + obs + 1,
    )
    ep = _run(vlm, capped)
    t = ep.trajectory
    assert t.truncated and t.num_turns == 2 and ep.context.num_images == 1
    assert len(ep.context) == prompt + 2 * turn + obs <= capped.max_context_tokens


def test_policy_tokens_beyond_max_response_tokens_truncate(sizes: tuple[Any, int, int, int]) -> None:
    vlm, prompt, turn, obs = sizes
    limits = RolloutLimits(
        max_turns=4,
        max_new_tokens=32,
        max_response_tokens=turn + 2,
        max_context_tokens=prompt + 10 * (turn + obs),
    )
    ep = _run(vlm, limits)
    t = ep.trajectory
    assert t.truncated and t.num_turns == 2
    assert t.num_policy_tokens == turn + 2  # the second turn was cut to the two tokens left
    assert [len(s) for s in t.turns] == [turn, 2]


def test_a_prompt_over_the_context_cap_is_named(sizes: tuple[Any, int, int, int]) -> None:
    vlm, prompt, _, _ = sizes
    with pytest.raises(InvalidInputError, match="max_context_tokens"):
        _run(vlm, RolloutLimits(max_turns=2, max_context_tokens=prompt))
    with pytest.raises(InvalidInputError, match="max_context_tokens"):
        RolloutLimits(max_context_tokens=-1)
