"""UniDoc-RL's parser: well-formed, truncated and adversarial turns; malformed output is data."""

from __future__ import annotations

import random

import pytest

from evidra.core.types import Sample
from evidra.methods.unidoc.paradigm import (
    UNIDOC_SYSTEM,
    UniDocAgent,
    parse_region,
    parse_select,
    parse_unidoc,
)
from evidra.paradigms import PARADIGMS


def test_each_action_is_read() -> None:
    search = parse_unidoc("<think>t</think><search> revenue 2021 </search>")
    assert search.action is not None and (search.action.name, search.action.argument) == (
        "search",
        "revenue 2021",
    )
    assert search.ok and search.fields["think"] == "t"
    select = parse_unidoc("<think>t</think><select>2</select>")
    assert select.action is not None and select.action.name == "select" and select.ok
    bbox = parse_unidoc("<think>t</think><bbox>[10, 20, 30, 40]</bbox>")
    assert (
        bbox.action is not None
        and bbox.action.box is not None
        and bbox.action.box.as_tuple() == (10, 20, 30, 40)
    )
    answer = parse_unidoc("<think>t</think><information>Paris</information><answer> Paris </answer>")
    assert answer.answer == "Paris" and answer.fields["information"] == "Paris" and answer.ok


def test_the_first_complete_action_wins() -> None:
    parsed = parse_unidoc("<think>t</think><select>1</select><answer>x</answer>")
    assert parsed.action is not None and parsed.action.name == "select" and parsed.answer is None
    unclosed = parse_unidoc("<think>t</think><answer>x<search>q</search>")
    assert unclosed.action is not None and unclosed.action.name == "search"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<think>t</think><select>-1</select>", "invalid <select>"),
        ("<think>t</think><select>two</select>", "invalid <select>"),
        ("<think>t</think><select>" + "9" * 4000 + "</select>", "invalid <select>"),
        (
            "<think>t</think><bbox>[[1, 2, 3, 4], [5, 6, 7, 8]]</bbox>",
            "invalid <bbox>",
        ),  # one region per action
        ("<think>t</think><bbox>[3, 2, 1, 4]</bbox>", "invalid <bbox>"),
        ("<think>t</think><bbox>[NaN, 2, 3, 4]</bbox>", "invalid <bbox>"),
        ("<think>t</think><bbox>[1e400, 2, 3, 4]</bbox>", "invalid <bbox>"),
        ("<think>t</think><bbox>[true, 2, 3, 4]</bbox>", "invalid <bbox>"),
        ("<think>t</think><bbox>" + "[" * 5000 + "</bbox>", "invalid <bbox>"),
        ("<think>t</think><search>   </search>", "empty <search>"),
        ("<search>q</search>", "missing <think>"),
        ("<think>t</think> I think the answer is 4", "no action"),
        ("<think>t</think><answer>unfinished", "no action"),
    ],
)
def test_malformed_turns_are_errors_not_exceptions(text: str, error: str) -> None:
    parsed = parse_unidoc(text)
    assert any(error in e for e in parsed.errors), parsed.errors
    if parsed.action is not None and parsed.action.name == "bbox":
        assert parsed.action.box is None  # the environment answers with its invalid-action message


def test_select_and_region_helpers() -> None:
    assert parse_select("0") == 0 and parse_select(" 12 ") == 12
    assert parse_select("1.5") is None and parse_select("") is None and parse_select("1000") is None
    assert parse_region("[[0, 0, 5, 5]]") is not None and parse_region("[0, 0, 5]") is None
    assert parse_region('{"x": 1}') is None and parse_region("[0, 0, 5, 5, 6]") is None


def test_the_parser_never_raises_on_random_tag_soup() -> None:
    rng = random.Random(0)
    pieces = [
        "<think>",
        "</think>",
        "<search>",
        "</search>",
        "<select>",
        "</select>",
        "<bbox>",
        "</bbox>",
        "<answer>",
        "</answer>",
        "<information>",
        "</information>",
        "[",
        "]",
        ",",
        "1",
        "-3",
        "1e9",
        "NaN",
        "x",
        " ",
        "\n",
        "\u0661",
        "<",
        ">",
        "/",
    ]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        parsed = parse_unidoc(text)
        assert parsed.text == text
        assert parsed.action is None or parsed.action.name in ("search", "select", "bbox", "answer")


def test_the_paradigm_is_registered_with_the_released_steps() -> None:
    agent = PARADIGMS.get("unidoc")()
    assert isinstance(agent, UniDocAgent)
    messages = agent.build_messages(Sample(id="s", question="Who leads?", answers=("x",)), ())
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[1].content[0].text == "User question: Who leads?"  # type: ignore[union-attr]
    for action in ("<search>", "<select>", "<bbox>", "<information>", "<answer>"):
        assert action in UNIDOC_SYSTEM
    assert agent.reward_names() == ("answer", "retrieval", "select", "crop", "format")
