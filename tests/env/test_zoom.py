"""CAVE zoom environment episodes driven by scripted policies."""

from __future__ import annotations

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
