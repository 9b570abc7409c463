"""Search-agent and ReAct parsers: well-formed, truncated and adversarial turns."""

from __future__ import annotations

from evidra.core.types import Box, CoordSpace, Sample
from evidra.paradigms.paradigm import PARADIGMS
from evidra.paradigms.react import SEARCH_R1_SYSTEM, ReAct
from evidra.paradigms.search_agent import VRAGRL_SYSTEM, SearchAgent, parse_action


def test_prompts_verbatim() -> None:
    assert VRAGRL_SYSTEM.startswith("Answer the given question. You must conduct reasoning inside <think>")
    assert "<bbox>[x1, y1, x2, y2]</bbox>. You can search as many times as your want." in VRAGRL_SYSTEM
    assert "bbox" not in SEARCH_R1_SYSTEM and SEARCH_R1_SYSTEM.endswith("<answer> Beijing </answer>.")
    msgs = SearchAgent().build_messages(Sample(id="a", question="Who?"), ())
    assert [m.role for m in msgs] == ["system", "user"] and msgs[1].plain_text == "Query: Who?"
    assert PARADIGMS.get("search_agent")().name == "search_agent"
    assert PARADIGMS.get("react")().name == "react" and PARADIGMS.get("search_r1")().name == "search_r1"


def test_well_formed_actions() -> None:
    s = parse_action("<think>need data</think><search> revenue 2021 </search>")
    assert s.ok and s.action is not None and (s.action.name, s.action.argument) == ("search", "revenue 2021")
    b = parse_action("<think>zoom</think><bbox>[10, 20, 30, 40]</bbox>")
    assert b.ok and b.action is not None and b.action.box == Box(10, 20, 30, 40, CoordSpace.MODEL)
    a = parse_action("<think>ok</think><answer> Beijing </answer>")
    assert a.ok and a.answer == "Beijing" and a.fields["think"] == "ok"


def test_truncated_outputs() -> None:
    t = parse_action("<think>need data</think><search> revenue")
    assert t.action is None and t.answer is None and t.errors
    assert parse_action("<think>unfinished").errors == (
        "missing <think>...</think>",
        "no action: expected one of <search>, <bbox>, <answer>",
    )


def test_adversarial_outputs() -> None:
    # the first action wins: an answer after a search is not an answer
    first = parse_action("<think>x</think><search>q</search><answer>Beijing</answer>")
    assert first.action is not None and first.action.name == "search" and first.answer is None
    for bad in (
        "(1,2,3,4)",
        "[-1, 0, 5, 5]",
        "[5, 5, 1, 1]",
        "[1, 2, 3]",
        '{"bbox_2d": [1,2,3,4]}',
        "[1e999, 0, 2e999, 5]",
    ):
        parsed = parse_action(f"<think>x</think><bbox>{bad}</bbox>")
        assert parsed.action is not None and parsed.action.box is None and parsed.errors, bad
    assert ReAct().parse("<think>x</think><bbox>[1, 2, 3, 4]</bbox>").action is None  # no crop in ReAct
    assert parse_action("<think>x</think><search></search>").errors == ("empty <search> query",)
