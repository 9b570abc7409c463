"""Every parser of this folder's paradigms is total: any text (tag soup included) parses."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.types import Parsed
from evidra.methods.evisrag.paradigm import parse_evidence
from evidra.methods.lang2act.paradigm import parse_toolchain
from evidra.methods.lat.paradigm import parse_coe
from evidra.paradigms.baselines import parse_think_answer

FRAGMENTS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<observe>",
    "</observe>",
    "<evidence>",
    "</evidence>",
    "<description>",
    "</description>",
    '<tool name="read_text_element" args="Image 1: x">',
    "</tool>",
    "Bounding box:",
    '{"bbox_2d": [',
    "]",
    ', "Image_index": ',
    "}",
    "(bbox_2d: (",
    ")",
    "[1]:",
    "[0]:",
    "1e400",
    "-3",
    "99999999999999999999",
    "NaN",
    "No answer",
    "insufficient to answer",
    "ü",
    "收入",
    "\x00",
    "\n",
    " ",
    ",",
    "'",
    '"',
]

soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=5)), max_size=40).map("".join)


@pytest.mark.parametrize("parse", [parse_coe, parse_evidence, parse_toolchain, parse_think_answer])
@settings(max_examples=150, deadline=None)
@given(text=soup)
def test_parsers_never_raise(parse: Callable[[str], Parsed], text: str) -> None:
    parsed = parse(text)
    assert parsed.text == text
    assert all(isinstance(e, str) for e in parsed.errors)
    for step in parsed.steps:
        assert step.page_index is None or step.page_index >= 0
