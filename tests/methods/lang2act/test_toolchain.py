"""Lang2Act toolchain format: prompts, toolbox files, parser, and stage rewards (RuleJudge)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Page, Sample, TextPart
from evidra.methods.lang2act.format import TOOLBOX
from evidra.methods.lang2act.paradigm import (
    DEFAULT_TOOLBOX,
    Tool,
    Toolchain,
    load_toolbox,
    parse_toolchain,
    save_toolbox,
    tool_listing,
)
from evidra.methods.lang2act.reward import lang2act_reward
from evidra.paradigms import PARADIGMS
from evidra.rewards.judge import RuleJudge

GOOD = (
    "<think>Image 2 has the revenue table.</think>"
    '<description><tool name="locate_visual_element" args="Image 2: revenue row">Row 3</tool>'
    '<tool name="read_numeric_value" args="Image 2: 2023 revenue">$5M</tool></description>'
    "<answer>$5M</answer>"
)


def two_pages(page_factory: Callable[..., Page]) -> Sample:
    p1, p2 = page_factory("doc-p0001"), page_factory("doc-p0002")
    return Sample(id="t", question="What was revenue in 2023?", answers=("$5M",), pages=(p1, p2))


def reward(stage: str, text: str, sample: Sample) -> dict[str, float]:
    r = lang2act_reward(stage, judge=RuleJudge())(parse_toolchain(text), sample)
    return {**r.components, "total": round(r.total, 9)}


def test_default_toolbox_is_the_papers_seven_tools() -> None:
    assert {t.name for t in DEFAULT_TOOLBOX} == set(TOOLBOX) and len(DEFAULT_TOOLBOX) == 7
    assert tool_listing(DEFAULT_TOOLBOX[:1]) == (
        '- <tool name="locate_visual_element" args="Image k: structural hint"> Locate specific visual '
        "elements or regions based on structural hints. </tool>"
    )


def test_stage_prompts(sample: Sample) -> None:
    sys2, user2 = Toolchain().build_messages(sample, sample.pages)
    assert (
        "analyze all 1 images" in sys2.plain_text and "Available Tools for <description>:" in sys2.plain_text
    )
    assert user2.content[0] == TextPart("Query: What was revenue in 2023\n\nImages: ")
    assert isinstance(user2.content[1], ImagePart)
    sys1, _ = PARADIGMS.get("toolchain.stage1")().build_messages(sample, sample.pages)
    assert "You have exactly 1 image(s)." in sys1.plain_text and "<tool" not in sys1.plain_text


def test_toolbox_file_round_trip_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "box.json"
    save_toolbox([Tool("count_rows", "Image k: table", "Count rows.")], path)
    (tool,) = load_toolbox(path)
    assert tool == Tool("count_rows", "Image k: table", "Count rows.")
    assert '<tool name="count_rows"' in Toolchain(toolbox=(tool,)).system_prompt(2)
    path.write_text(json.dumps([{"name": "x"}]))
    with pytest.raises(InvalidInputError, match="entry 0"):
        load_toolbox(path)


def test_well_formed_output_parses_tool_steps() -> None:
    parsed = parse_toolchain(GOOD)
    assert parsed.ok and parsed.answer == "$5M"
    assert [(s.text, s.page_index) for s in parsed.steps] == [("Row 3", 1), ("$5M", 1)]
    assert parsed.action is not None and parsed.action.name == "locate_visual_element"
    assert json.loads(parsed.fields["tools"])[1]["args"] == "Image 2: 2023 revenue"


def test_stage2_reward_well_formed(page_factory: Callable[..., Page]) -> None:
    # Eq. 12: 0.8 * 1 (judge: "$5M" contains the reference) + 0.2 * 1 (valid toolchain).
    assert reward("toolrl", GOOD, two_pages(page_factory)) == {
        "answer": 1.0,
        "format": 1.0,
        "tool": 1.0,
        "total": 1.0,
    }


def test_stage2_unknown_tool_or_missing_image_voids_the_tool_term(page_factory: Callable[..., Page]) -> None:
    unknown = GOOD.replace("read_numeric_value", "magic_oracle")
    assert reward("toolrl", unknown, two_pages(page_factory))["total"] == 0.8
    out_of_range = GOOD.replace("Image 2: 2023", "Image 7: 2023")
    assert reward("toolrl", out_of_range, two_pages(page_factory))["tool"] == 0.0


def test_tool_outside_description_is_leakage(page_factory: Callable[..., Page]) -> None:
    text = GOOD.replace(
        "<answer>$5M</answer>",
        '<answer><tool name="read_text_element" args="Image 1: x">y</tool>$5M</answer>',
    )
    parsed = parse_toolchain(text)
    assert any("Tool Leakage" in e for e in parsed.errors)
    assert reward("toolrl", text, two_pages(page_factory))["tool"] == 0.0


def test_stage1_reward_and_wrong_order(page_factory: Callable[..., Page]) -> None:
    text = "<think>a</think><description>In Image 2 the row reads $5M.</description><answer>$5M</answer>"
    assert reward("actionrl", text, two_pages(page_factory)) == {"answer": 1.0, "format": 1.0, "total": 1.0}
    swapped = "<answer>$4M</answer><think>a</think><description>d</description>"
    assert not parse_toolchain(swapped).ok
    # stage 1's format is "three non-empty blocks" (order unchecked, as released); the answer is
    # wrong, and the paper's stage-1 reward is the answer alone (Eq. 2)
    assert reward("actionrl", swapped, two_pages(page_factory)) == {
        "answer": 0.0,
        "format": 1.0,
        "total": 0.0,
    }


def test_truncated_and_adversarial_outputs_never_raise(page_factory: Callable[..., Page]) -> None:
    for text in [
        "",
        "<think>cut",
        '<description><tool name="x" args="Image 1: ',
        GOOD * 3,
        '<description><tool name="read_text_element" args="Image １: ü">ß</tool></description>',
    ]:
        parsed = parse_toolchain(text)
        assert isinstance(parsed.errors, tuple)
    repeated = reward("toolrl", GOOD + "<answer>$5M</answer>", two_pages(page_factory))
    assert repeated["format"] == 0.0 and repeated["tool"] == 0.0  # strict format: each tag once
