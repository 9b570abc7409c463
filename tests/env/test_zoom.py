"""CAVE zoom environment episodes driven by scripted policies."""

from __future__ import annotations

from typing import Any

import pytest

from evidra.core.types import ImagePart, Page, Sample
from evidra.env import ENVIRONMENTS
from evidra.env.zoom import ZoomEnv
from evidra.methods.cave.paradigm import ZoomAgent

CALL = (
    '<think>t</think><tool_call>{{"name": "image_zoom_in_tool", "arguments": '
    '{{"bbox_2d": {box}}}}}</tool_call>'
)


def _sample(page: Page) -> Sample:
    return Sample(id="z", question="What is written?", answers=("x",), pages=(page,))


def test_zoom_then_answer(pages: dict[str, Page]) -> None:
    env = ZoomEnv(ZoomAgent(), max_rounds=4)
    prompt = env.reset(_sample(pages["pA"]))
    assert "1000 x 2000 pixels" in prompt[1].plain_text and prompt[1].images[0].page_id == "pA"
    zoom = env.step(CALL.format(box="[100, 200, 300, 400]"))
    assert zoom.info.crop == (100, 200, 300, 400) and zoom.info.area_ratio == pytest.approx(0.02)
    parts = zoom.observation[0].content
    assert parts[0].text == "<tool_response>" and parts[2].text == "</tool_response>"
    assert isinstance(parts[1], ImagePart) and parts[1].image.size == (447, 447)  # grown to min_pixels
    assert parts[1].image.getpixel((10, 10)) == (0, 0, 0)  # the block pasted at (100, 200)
    done = env.step("<think>ok</think><answer>x</answer>")
    assert done.done and done.info.answer == "x" and env.zooms == [(100, 200, 300, 400)]
    assert ENVIRONMENTS.get("zoom") is ZoomEnv


def test_invalid_zooms_and_round_limit(pages: dict[str, Page]) -> None:
    env = ZoomEnv(ZoomAgent(), max_rounds=5)
    env.reset(_sample(pages["pA"]))
    steps = [
        env.step(CALL.format(box="[1200, 0, 1300, 10]")),  # outside the image
        env.step('<tool_call>{"name": "crop", "arguments": {}}</tool_call>'),  # unknown tool
        env.step("<tool_call>not json</tool_call>"),
        env.step("just text"),
        env.step(CALL.format(box="[0, 0, 10, 10]")),  # 5th round: the limit ends the episode
    ]
    assert [s.info.invalid for s in steps[:4]] == [True, True, True, True]
    assert "outside" in steps[0].observation[0].plain_text
    assert "image_zoom_in_tool" in steps[1].observation[0].plain_text
    assert steps[4].done and steps[4].info.turn_limit and env.invalid == 4


def test_a_crop_too_thin_for_the_processor_is_an_invalid_zoom(
    pages: dict[str, Page], tiny_vlms: dict[str, Any]
) -> None:
    from evidra.models.context import encode_turn

    env = ZoomEnv(ZoomAgent(), max_rounds=4, min_pixels=28 * 28 * 2, max_pixels=320 * 320)
    env.reset(_sample(pages["pA"]))
    thin = env.step(CALL.format(box="[10, 0, 11, 1500]"))  # shown at 1 x 1533 (grown to min_pixels)
    assert thin.info.invalid and not thin.done and env.zooms == []
    reply = thin.observation[0].plain_text
    assert "the box [10, 0, 11, 1500] is too thin: its sides differ 1533-fold (at most 200)" in reply
    narrow = env.step(CALL.format(box="[10, 0, 20, 1500]"))  # 150-fold: the processor takes it
    assert narrow.info.action == "zoom"
    encoded = encode_turn(tiny_vlms["qwen2_5_vl"].processor, narrow.observation, close_previous=True)
    assert encoded.num_images == 1
