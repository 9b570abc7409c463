"""The linear scanners find what the regular expressions they replace find, match for match.

Each oracle below is a pattern the parsers used before (their lazy groups backtrack in
superlinear time on unclosed tags); on random tag soup both must agree exactly.
"""

from __future__ import annotations

import re

import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.tagscan import find_blocks, find_named_blocks, finite_float, parse_digits
from evidra.methods.evisrag import reward as evisrag
from evidra.methods.lang2act.format import parse_tools, quoted_tool_calls
from evidra.methods.lat import reward as lat
from evidra.methods.lat.parse import cut_box_lists
from evidra.methods.vragrl import reward as vragrl

FRAGMENTS = [
    "<a>",
    "</a>",
    "<A>",
    "</A>",
    "<b>",
    "</b>",
    "x",
    " ",
    "\n",
    "\x1c",
    "\u017f",
    "\u212a",
    "<tool",
    " name=",
    "name=",
    " args=",
    "args=",
    "ARGS=",
    '"',
    "'",
    ">",
    "</tool>",
    "</TOOL>",
    '<tool name="',
    "<tool name='",
    '" args="',
    "' args='",
    '">',
    "'>",
    "Bounding box:",
    "\nBounding box:",
    "{",
    "}",
    ", {",
    ",",
    "<|im_start|>user",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<observe>",
    "</observe>",
    "<evidence>",
    "</evidence>",
    "<search>",
    "</search>",
]
soup = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map("".join)
CHECK = settings(max_examples=300, deadline=None, derandomize=True)

TOOL_PAPER = re.compile(
    r"<tool\s+name=(?P<q1>[\"'])(?P<name>.*?)(?P=q1)\s+args=(?P<q2>[\"'])(?P<args>.*?)(?P=q2)\s*>(?P<body>.*?)</tool>",
    re.DOTALL | re.IGNORECASE,
)
TOOL_FULL = re.compile(
    r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']\s+args=[\"'](?P<args>[^\"']+)[\"']\s*>(?P<body>.*?)</tool>",
    re.DOTALL | re.IGNORECASE,
)


@CHECK
@given(soup)
def test_blocks_match_the_lazy_pattern(text: str) -> None:
    for flags, kwargs in ((re.DOTALL, {}), (0, {"dotall": False}), (re.DOTALL | re.I, {"ignore_case": True})):
        want = [(m.start(), m.group(1), m.end()) for m in re.finditer(r"<a>(.*?)</a>", text, flags)]
        got = [(b.start, b.body(), b.end) for b in find_blocks(text, "<a>", "</a>", **kwargs)]  # type: ignore[arg-type]
        assert got == want


@CHECK
@given(soup)
def test_named_blocks_match_the_backreference_pattern(text: str) -> None:
    want = [(m.group(1), m.group(2)) for m in re.finditer(r"<(a|b|search)>(.*?)</\1>", text, re.DOTALL)]
    assert [(b.head.group(1), b.body()) for b in find_named_blocks(text, ("a", "b", "search"))] == want


@CHECK
@given(soup)
def test_tool_calls_match_the_released_patterns(text: str) -> None:
    want = [(m["name"], m["args"], m["body"]) for m in TOOL_PAPER.finditer(text)]
    assert [(c.name, c.args, c.body) for c in quoted_tool_calls(text)] == want
    strict = [(m["name"].strip(), m["args"].strip(), m["body"].strip()) for m in TOOL_FULL.finditer(text)]
    assert [(c.name, c.args, c.body) for c in parse_tools(text)] == strict


@CHECK
@given(soup)
def test_lat_citations_match_the_released_patterns(text: str) -> None:
    answer_boxes = regex.compile(r"Bounding box:\s*\{.*?\}(,\s*\{.*?\})*")
    eval_boxes = regex.compile(r"\nBounding box:\s*\{.*?\}(,\s*\{.*?\})*")
    assert cut_box_lists(text) == answer_boxes.sub("", text)
    assert cut_box_lists(text, regex.compile(r"\nBounding box:\s*\{")) == eval_boxes.sub("", text)
    fmt = regex.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", regex.DOTALL)
    assert lat.format_reward(text) == (1.0 if fmt.fullmatch(text.strip()) else -1.0)


@CHECK
@given(soup)
def test_evisrag_and_vragrl_match_the_released_patterns(text: str) -> None:
    full = re.compile(
        r"<observe>.*?</observe>\s*<evidence>.*?</evidence>\s*<think>.*?</think>\s*<answer>.*?</answer>",
        re.DOTALL,
    )
    once = all(text.count(f"<{t}>") == 1 and text.count(f"</{t}>") == 1 for t in evisrag._TAGS)
    assert evisrag.format_reward(text) == (1.0 if full.fullmatch(text) and once else 0.0)
    assert vragrl.remove_text_between_tags(text) == re.sub(r"<\|im_start\|>user.*?<\|im_end\|>", "", text)
    greedy = bool(
        re.search(r"<answer>.*</answer>", text, re.DOTALL)
        and re.search(r"<search>.*</search>", text, re.DOTALL)
    )
    assert vragrl.compute_format_reward_only(text) == (1.0 if greedy else 0.0)


def test_numbers_are_bounded_and_finite() -> None:
    assert parse_digits("007") == 7 and parse_digits("-3") == -3 and parse_digits("\u0661\u0662\u0663") == 123
    assert parse_digits("9" * 18) == 10**18 - 1 and parse_digits("9" * 19) is None
    assert parse_digits("9" * 5000) is None and parse_digits("") is None and parse_digits("1e3") is None
    assert (
        finite_float(10**400) is None and finite_float("nan") is None and finite_float(float("-inf")) is None
    )
    assert finite_float(True) == 1.0 and finite_float(None) is None and finite_float(2) == 2.0
