"""Structured answers: the schema asked for, and a parser that reads any reply without raising."""

from __future__ import annotations

import json

import pytest

from evidra.core.types import CoordSpace, ImagePart, Page, TextPart
from evidra.models.structured import (
    ANSWER_SCHEMA,
    MAX_STEPS,
    NO_ANSWER,
    build_messages,
    parse,
    response_format,
)

IDS = ["doc-p0001", "doc-p0002"]


def test_a_well_formed_answer_reads_whole_with_boxes_in_the_model_frame() -> None:
    text = json.dumps(
        {
            "answer": "1987",
            "steps": [
                {"text": "founded in 1987", "page": 2, "box": [10, 20, 300, 60]},
                {"text": "by id", "page": "doc-p0001", "box": [0, 0, 5.5, 5]},
            ],
        }
    )
    parsed = parse(text, IDS)
    assert parsed.answer == "1987" and parsed.errors == ()
    assert [s.page_index for s in parsed.steps] == [1, 0]
    assert parsed.steps[0].box is not None and parsed.steps[0].box.as_tuple() == (10, 20, 300, 60)
    assert parsed.steps[1].box is not None and parsed.steps[1].box.space is CoordSpace.MODEL


def test_a_fenced_reply_and_a_null_answer() -> None:
    parsed = parse('```json\n{"answer": null, "steps": []}\n```', IDS)
    assert parsed.answer == NO_ANSWER and parsed.errors == ()


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"answer": "1987", "steps": [{"text": "a"', "the answer is not JSON"),  # cut off
        ("", "the answer is empty"),
        ("The answer is 1987.", "the answer is not JSON"),  # prose
        ('["1987"]', "not an object"),
        ('{"steps": []}', "no answer field"),
        ('{"answer": 1987, "steps": []}', "answer is int"),
        ('{"answer": NaN, "steps": []}', "the answer is not JSON"),
        ("[" * 100_000, "the answer is not JSON"),  # nesting past the recursion limit
    ],
)
def test_malformed_replies_are_data_with_one_error(text: str, error: str) -> None:
    parsed = parse(text, IDS)
    assert parsed.answer is None or error.startswith("answer is")
    assert any(error in e for e in parsed.errors), parsed.errors


def test_hostile_steps_are_dropped_or_unboxed_never_raised() -> None:
    steps = [
        {"text": "bool page", "page": True, "box": [1, 2, 3, 4]},
        {"text": "page 3 of 2", "page": 3, "box": [1, 2, 3, 4]},
        {"text": "inverted", "page": 1, "box": [30, 2, 3, 4]},
        {"text": "infinite", "page": 1, "box": [1e999, 2, 3, 4]},
        {"text": "three numbers", "page": 1, "box": [1, 2, 3]},
        {"text": "strings", "page": 1, "box": ["1", "2", "3", "4"]},
        {"text": "huge integer", "page": 1, "box": [10**400, 2, 3, 4]},
        "not an object",
        {"page": "2", "box": [1, 2, 3, 4]},  # no text; the page as a numeral
    ]
    text = json.dumps({"answer": "x", "steps": steps}).replace("Infinity", "1e999")
    parsed = parse(text, IDS)
    assert parsed.answer == "x"
    assert [s.page_index for s in parsed.steps] == [None, None, 0, 0, 0, 0, 0, 1]
    assert [s.box is not None for s in parsed.steps] == [True, True, False, False, False, False, False, True]
    assert len(parsed.errors) == 9, parsed.errors


def test_too_many_steps_are_cut_and_said() -> None:
    steps = [{"text": str(i), "page": 1, "box": [0, 0, 1, 1]} for i in range(MAX_STEPS + 5)]
    parsed = parse(json.dumps({"answer": "x", "steps": steps}), IDS)
    assert len(parsed.steps) == MAX_STEPS and any("steps; the first" in e for e in parsed.errors)


def test_the_request_asks_for_the_schema_and_shows_each_page_labelled() -> None:
    assert response_format()["json_schema"]["schema"] is ANSWER_SCHEMA
    assert ANSWER_SCHEMA["required"] == ["answer", "steps"]
    pages = [Page(pid, f"/x/{pid}.png", 10, 10) for pid in IDS]
    (message,) = build_messages("When?", pages)
    images = [p for p in message.content if isinstance(p, ImagePart)]
    texts = [p.text for p in message.content if isinstance(p, TextPart)]
    assert [i.page_id for i in images] == IDS and texts[:2] == ["Image 1:", "Image 2:"]
    assert texts[2] == "Question: When?" and "JSON" in texts[3]


def test_a_raw_control_character_inside_a_string_is_read() -> None:
    # grammar-constrained decoding (xgrammar) admits a raw tab where strict JSON wants "\t"
    parsed = parse('{"answer": "a\tb", "steps": [{"text": "x\x01", "page": 1, "box": [1, 2, 3, 4]}]}', IDS)
    assert parsed.answer == "a\tb" and parsed.steps[0].text == "x\x01" and parsed.errors == ()
