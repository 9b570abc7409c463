"""Zoom-agent parser: well-formed, truncated and adversarial turns."""

from __future__ import annotations

from evidra.core.types import Box
from evidra.methods.cave.paradigm import parse_zoom_call, parse_zoom_turn
from evidra.paradigms.paradigm import PARADIGMS


def test_well_formed_zoom_and_answer() -> None:
    p = parse_zoom_turn(
        '<think>small</think><tool_call>{"name": "image_zoom_in_tool", "arguments": '
        '{"bbox_2d": [10, 20, 30.5, 40], "label": "x"}}</tool_call>'
    )
    assert p.ok and p.action is not None and p.action.name == "zoom"
    assert p.action.box == Box(10, 20, 30.5, 40)
    a = parse_zoom_turn("<think>t</think><answer> 42 </answer>")
    assert a.ok and a.answer == "42" and a.action is not None and a.action.name == "answer"
    assert PARADIGMS.get("zoom_agent")().reward_names()[:2] == ("accuracy", "format")


def test_truncated_and_malformed() -> None:
    t = parse_zoom_turn('<think>t</think><tool_call>{"name": "image_zoom_in_tool", "argu')
    assert t.action is None and any("no action" in e for e in t.errors)
    assert parse_zoom_turn("<answer>4").answer is None
    assert parse_zoom_call("[1, 2, 3, 4]")[1] is not None
    assert parse_zoom_call('{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 3]}}')[0] is None
    assert (
        parse_zoom_call('{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [5, 2, 3, 4]}}')[0] is None
    )
    assert (
        parse_zoom_call('{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [1, 2, 1e999, 4]}}')[0]
        is None
    )
    assert (
        parse_zoom_call('{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [true, 2, 3, 4]}}')[0]
        is None
    )
    assert parse_zoom_call("[" * 100000)[1] is not None  # deep nesting: no RecursionError escapes


def test_adversarial_first_action_wins() -> None:
    # an answer after a tool call does not end the episode early, and vice versa
    p = parse_zoom_turn(
        '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [0, 0, 9, 9]}}'
        "</tool_call><answer>guess</answer>"
    )
    assert p.action is not None and p.action.name == "zoom" and p.answer is None
    q = parse_zoom_turn("<answer>7</answer><tool_call>{}</tool_call>")
    assert q.answer == "7" and "missing <think>...</think>" in q.errors
