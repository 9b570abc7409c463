"""Prompt baselines of EVisRAG (CoT, DDCOT, CCOT, COCOT) and Lang2Act (vanilla, ToT, GoT)."""

from __future__ import annotations

import pytest

from evidra.core.types import ImagePart, Sample, TextPart
from evidra.paradigms import PARADIGMS
from evidra.paradigms.baselines import BASELINES, parse_think_answer


@pytest.mark.parametrize("name", ["cot", "ddcot", "ccot", "cocot"])
def test_evisrag_baselines_put_the_question_first_then_images(name: str, sample: Sample) -> None:
    (msg,) = PARADIGMS.get(name)().build_messages(sample, sample.pages)
    head = msg.content[0]
    assert isinstance(head, TextPart) and head.text.endswith("Question: What was revenue in 2023")
    assert "insufficient to answer" in head.text
    assert isinstance(msg.content[1], ImagePart)


@pytest.mark.parametrize("name", ["vanilla", "tot", "got"])
def test_lang2act_baselines_use_a_system_prompt_with_the_image_count(name: str, sample: Sample) -> None:
    system, user = PARADIGMS.get(name)().build_messages(sample, sample.pages)
    assert system.role == "system" and "{num_images}" not in system.plain_text
    assert "1 image(s)" in system.plain_text
    assert user.content[0] == TextPart("Query: What was revenue in 2023\n\nImages: ")


def test_templates_are_the_papers() -> None:
    assert BASELINES["ddcot"].template.count("Sub-questions:") == 1
    assert "**generate a scene graph**" in BASELINES["ccot"].template
    assert "**similarities and differences**" in BASELINES["cocot"].template
    assert "'Tree of Thoughts'" in BASELINES["tot"].template
    assert "**Structure as a Graph:**" in BASELINES["got"].template
    assert BASELINES["cot"].template.startswith(
        "You are an AI assistant. I will provide a question and some images."
    )


def test_think_answer_parser() -> None:
    good = parse_think_answer("<think>r</think><answer> 42 </answer>")
    assert good.ok and good.answer == "42" and good.fields["think"] == "r"
    assert parse_think_answer("<answer>1</answer><think>r</think>").errors == ("<answer> before <think>",)
    repeated = parse_think_answer("<think>r</think><answer>1</answer><answer>2</answer>")
    assert repeated.answer == "1" and repeated.errors == ("<answer> repeated",)
    cut = parse_think_answer("<think>r</think><answer>4")
    assert cut.answer == "4" and cut.errors == ("unclosed <answer> (truncated)",)
    assert parse_think_answer("").errors == ("missing <think>", "missing <answer>")
