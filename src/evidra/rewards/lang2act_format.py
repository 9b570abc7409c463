"""Lang2Act output checks: block structure and linguistic-tool validity (Lang2Act §3, A.4).

Pure functions of the response text, no judge: the strict format of toolrl.py
(``check_strict_format``), the stage-1 format of actionrl.py (``actionrl_format_score``), the
released graded tool score (``validate_tool_content``) and the paper's binary
``I_valid(z | T_box)`` (``tool_validity``, Eq. 13). The rewards that combine them with the
judged answer are in ``evidra.rewards.lang2act``.

Output format: ``<think>..</think><description><tool name="X" args="Image k: ..">result</tool>
..</description><answer>..</answer>``.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

# The 7 tools of the curated toolbox listed in the prompt, plus compute_difference, which the
# released validator also accepts (ALLOWED_TOOLS has 8 names).
TOOLBOX: frozenset[str] = frozenset(
    {
        "locate_visual_element",
        "read_text_element",
        "read_numeric_value",
        "identify_entity_attribute",
        "compare_values",
        "compute_percentage",
        "infer_missing_information",
    }
)
ALLOWED_TOOLS_UPSTREAM: frozenset[str] = TOOLBOX | {"compute_difference"}
NUMERIC_TOOLS: frozenset[str] = frozenset({"compute_difference", "compute_percentage"})

_TOOL_OPEN = re.compile(r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']", re.IGNORECASE)
_TOOL_FULL = re.compile(
    r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']\s+args=[\"'](?P<args>[^\"']+)[\"']\s*>(?P<body>.*?)</tool>",
    re.DOTALL | re.IGNORECASE,
)
# Paper mode: attribute values delimited by a matching quote, so args="Row for 'France'" parse
# (the released pattern forbids both quote characters inside args and silently drops the call).
_TOOL_PAPER = re.compile(
    r"<tool\s+name=(?P<q1>[\"'])(?P<name>.*?)(?P=q1)\s+args=(?P<q2>[\"'])(?P<args>.*?)(?P=q2)\s*>(?P<body>.*?)</tool>",
    re.DOTALL | re.IGNORECASE,
)
_IMAGE_ID = re.compile(r"Image\s+(\d+)", re.IGNORECASE)
_ARGS_PREFIX = re.compile(r"Image\s+\d+\s*:")
_TAGS = ("think", "description", "answer")


@dataclass(frozen=True)
class StrictFormat:
    """Result of toolrl.py ``check_strict_format``: valid, error messages, stripped blocks."""

    valid: bool
    errors: tuple[str, ...] = ()
    parsed: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": list(self.errors), "parsed": dict(self.parsed)}


def _invalid(message: str) -> StrictFormat:
    return StrictFormat(False, (message,))


def check_strict_format(response: str) -> StrictFormat:
    """Each of ``<think>``, ``<description>``, ``<answer>`` opens and closes exactly once
    (case-insensitive), in that order, and every ``<tool name=..`` lies inside
    ``<description>``. Text outside the blocks is allowed.

    >>> check_strict_format("<think>x</think><description>d</description><answer>a</answer>").valid
    True
    """
    text = response if isinstance(response, str) else ""
    pos: dict[str, tuple[int, int]] = {}
    for tag in _TAGS:
        opens = list(re.finditer(f"<{tag}>", text, re.IGNORECASE))
        closes = list(re.finditer(f"</{tag}>", text, re.IGNORECASE))
        if len(opens) != 1 or len(closes) != 1:
            return _invalid(f"Tag <{tag}> must appear exactly once.")
        if opens[0].start() >= closes[0].start():
            return _invalid(f"Tag <{tag}> malformed.")
        pos[tag] = (opens[0].end(), closes[0].start())
    errors = []
    if pos["think"][1] > pos["description"][0]:
        errors.append("Order Error: <description> must follow <think>.")
    if pos["description"][1] > pos["answer"][0]:
        errors.append("Order Error: <answer> must follow <description>.")
    if errors:
        return StrictFormat(False, tuple(errors))
    blocks = {tag: text[start:end].strip() for tag, (start, end) in pos.items()}
    total, inside = len(_TOOL_OPEN.findall(text)), len(_TOOL_OPEN.findall(blocks["description"]))
    if total != inside:
        return _invalid(f"Tool Leakage: {total} total tools, but only {inside} inside <description>.")
    return StrictFormat(True, (), blocks)


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: str
    body: str


def parse_tools(description: str) -> list[ToolCall]:
    """Well-formed ``<tool name=".." args="..">body</tool>`` calls (quotes " or ', non-empty args)."""
    return [
        ToolCall(m.group("name").strip(), m.group("args").strip(), m.group("body").strip())
        for m in _TOOL_FULL.finditer(description)
    ]


def _tool_penalties(
    tool: ToolCall, selected: set[int], num_images: int, allowed: Collection[str]
) -> list[float]:
    """Deductions for one tool, in the released order (subtracted one by one, so the float
    result matches bit for bit: 1 - 0.2 - 0.2 is 0.6000000000000001)."""
    if tool.name not in allowed:
        return [0.3]
    out = []
    if tool.name in NUMERIC_TOOLS:
        if not tool.args:
            out.append(0.2)
    else:
        if not _ARGS_PREFIX.match(tool.args):
            out.append(0.2)
        ids = {int(x) for x in _IMAGE_ID.findall(tool.args)}
        if not ids:
            out.append(0.2)
        for image_id in ids:
            if not 1 <= image_id <= num_images:
                out.append(0.5)
            elif image_id not in selected:
                out.append(0.1)
    if not tool.body:
        out.append(0.1)
    return out


def validate_tool_content(
    description: str, think_content: str, num_images: int, allowed: Collection[str] = ALLOWED_TOOLS_UPSTREAM
) -> float:
    """toolrl.py's graded tool score in [0, 1]: start at 1 and deduct per tool (unknown -0.3;
    args not ``Image k:`` -0.2; no image id -0.2; id out of range -0.5; id not selected in
    ``<think>`` -0.1; empty body -0.1), -0.1 for more than 8 tools. No tools scores 0.

    >>> validate_tool_content('<tool name="read_text_element" args="Image 4: x">y</tool>', "", 3)
    0.5
    """
    tools = parse_tools(description)
    if not tools:
        return 0.0
    selected = {int(x) for x in _IMAGE_ID.findall(think_content)}
    score = 1.0
    for tool in tools:
        for penalty in _tool_penalties(tool, selected, num_images, allowed):
            score -= penalty
    if len(tools) > 8:
        score -= 0.1
    return max(0.0, score)


def tool_validity(response: str, num_images: int, toolbox: Collection[str] = TOOLBOX) -> float:
    """Lang2Act Eq. 13, ``I_valid(z | T_box)``: 1.0 iff the strict format holds, there is at
    least one tool, every ``<tool`` opening is a well-formed call of a toolbox tool, and every
    non-numeric tool's args start ``Image k:`` with all referenced ids in 1..num_images."""
    fmt = check_strict_format(response)
    if not fmt.valid:
        return 0.0
    description = fmt.parsed["description"]
    tools = [
        ToolCall(m.group("name").strip(), m.group("args").strip(), m.group("body").strip())
        for m in _TOOL_PAPER.finditer(description)
    ]
    if not tools or len(tools) != len(_TOOL_OPEN.findall(description)):
        return 0.0
    for tool in tools:
        if tool.name not in toolbox:
            return 0.0
        if tool.name in NUMERIC_TOOLS:
            continue
        ids = [int(x) for x in _IMAGE_ID.findall(tool.args)]
        if not _ARGS_PREFIX.match(tool.args) or not ids or not all(1 <= i <= num_images for i in ids):
            return 0.0
    return 1.0


def parse_generation(response: str) -> dict[str, str | None]:
    """actionrl.py: first non-greedy ``<think>``/``<description>``/``<answer>`` (IGNORECASE), stripped."""
    out: dict[str, str | None] = {}
    for tag in _TAGS:
        match = re.search(f"<{tag}>(.*?)</{tag}>", response, re.DOTALL | re.IGNORECASE)
        out[tag] = match.group(1).strip() if match else None
    return out


def actionrl_format_score(response: str) -> float:
    """Stage-1 format: 1.0 iff all three blocks exist with non-empty content (order unchecked)."""
    parsed = parse_generation(response if isinstance(response, str) else "")
    return 1.0 if all(parsed[tag] for tag in _TAGS) else 0.0
