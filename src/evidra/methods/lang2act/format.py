"""Lang2Act output checks: block structure and linguistic-tool validity (Lang2Act §3, A.4).

Pure functions of the response text, no judge: the strict format of toolrl.py
(``check_strict_format``), the stage-1 format of actionrl.py (``actionrl_format_score``), the
released graded tool score (``validate_tool_content``) and the paper's binary
``I_valid(z | T_box)`` (``tool_validity``, Eq. 13). The rewards that combine them with the
judged answer are in ``evidra.methods.lang2act.reward``.

Output format: ``<think>..</think><description><tool name="X" args="Image k: ..">result</tool>
..</description><answer>..</answer>``.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from evidra.core.tagscan import find_blocks, first_block, parse_digits, starts_of

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
# the released validator's value-taking tools (no ``Image k:`` check); a curated toolbox declares
# its own (``Tool.numeric``), which ``tool_validity`` takes as ``numeric``
NUMERIC_TOOLS: frozenset[str] = frozenset({"compute_difference", "compute_percentage"})

_TOOL_OPEN = re.compile(r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']", re.IGNORECASE)
# any tool tag opening, whatever its attributes and their order (``<tool args=.. name=..>`` too)
_ANY_TOOL_OPEN = re.compile(r"<tool(?=[\s/>])", re.IGNORECASE)
# The released call pattern is ``_TOOL_HEAD`` + ``(?P<body>.*?)</tool>`` (DOTALL | IGNORECASE);
# the body is found by ``find_blocks``, linear where the lazy group rescans unclosed calls.
_TOOL_HEAD = re.compile(
    r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']\s+args=[\"'](?P<args>[^\"']+)[\"']\s*>", re.IGNORECASE
)
# Paper mode: attribute values delimited by a matching quote, so args="Row for 'France'" parse
# (the released pattern forbids both quote characters inside args and silently drops the call).
# The calls are those of ``<tool\s+name=(?P<q1>["'])(?P<name>.*?)(?P=q1)\s+args=(?P<q2>["'])
# (?P<args>.*?)(?P=q2)\s*>(?P<body>.*?)</tool>`` (DOTALL | IGNORECASE), found by
# ``quoted_tool_calls`` in O(n log n): three lazy groups in a row backtrack in O(n^4).
_QUOTED_HEAD = re.compile(r"<tool\s+name=([\"'])", re.IGNORECASE)
_NAME_END = re.compile(r"([\"'])(?=\s+args=([\"']))", re.IGNORECASE)
_ARGS_END = re.compile(r"([\"'])\s*>")
_IMAGE_ID = re.compile(r"Image\s+(\d+)", re.IGNORECASE)
_ARGS_PREFIX = re.compile(r"Image\s+\d+\s*:")
TAGS = ("think", "description", "answer")


def _image_ids(text: str) -> list[int]:
    """The ``Image k`` numbers of ``text``; a number too long to read (``parse_digits``) is -1,
    an image id out of every range (all such ids read as the same one)."""
    return [-1 if (k := parse_digits(x)) is None else k for x in _IMAGE_ID.findall(text)]


@dataclass(frozen=True)
class StrictFormat:
    """Result of toolrl.py ``check_strict_format``: valid, error messages, stripped blocks."""

    valid: bool
    errors: tuple[str, ...] = ()
    parsed: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
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
    for tag in TAGS:
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
        ToolCall(b.head.group("name").strip(), b.head.group("args").strip(), b.body().strip())
        for b in find_blocks(description, _TOOL_HEAD, "</tool>", ignore_case=True)
    ]


def quoted_tool_calls(text: str) -> list[ToolCall]:
    """Calls whose name and args are each delimited by one quote character, ``"`` or ``'``
    (the other may occur inside), unstripped: the lazy regex's matches, in O(n log n).

    A name ends at the first matching quote followed by ``args=`` from which the rest of a call
    can still match; the args end at the first matching quote followed by ``>``; the body ends
    at the first ``</tool>``.

    >>> quoted_tool_calls("<tool name='a' args='Row for \\"F\\"'>x</tool>")[0].args
    'Row for "F"'
    """
    closes = starts_of(text, "</tool>", ignore_case=True)
    if not closes:
        return []
    args_ends: dict[str, list[tuple[int, int]]] = {'"': [], "'": []}  # quote -> (at, after '>')
    for m in _ARGS_END.finditer(text):
        args_ends[m.group(1)].append((m.start(), m.end()))
    ends_at = {q: [at for at, _ in v] for q, v in args_ends.items()}
    # name ends from which a whole call matches: quote -> [(at, args start, args end, body start, close)]
    name_ends: dict[str, list[tuple[int, int, int, int, int]]] = {'"': [], "'": []}
    for m in _NAME_END.finditer(text):
        args_start = text.index(m.group(2), m.end()) + 1  # after `\s+args=` and its quote
        i = bisect_left(ends_at[m.group(2)], args_start)
        if i == len(ends_at[m.group(2)]):
            continue
        args_end, body_start = args_ends[m.group(2)][i]
        c = bisect_left(closes, body_start)
        if c < len(closes):
            name_ends[m.group(1)].append((m.start(), args_start, args_end, body_start, closes[c]))
    name_at = {q: [v[0] for v in vs] for q, vs in name_ends.items()}
    calls, pos = [], 0
    while (head := _QUOTED_HEAD.search(text, pos)) is not None:
        quote = head.group(1)
        k = bisect_left(name_at[quote], head.end())
        if k == len(name_at[quote]):
            pos = head.start() + 1
            continue
        name_end, args_start, args_end, body_start, close = name_ends[quote][k]
        calls.append(ToolCall(text[head.end() : name_end], text[args_start:args_end], text[body_start:close]))
        pos = close + len("</tool>")
    return calls


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
        ids = set(_image_ids(tool.args))
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
    selected = set(_image_ids(think_content))
    score = 1.0
    for tool in tools:
        for penalty in _tool_penalties(tool, selected, num_images, allowed):
            score -= penalty
    if len(tools) > 8:
        score -= 0.1
    return max(0.0, score)


def tool_validity(
    response: str,
    num_images: int,
    toolbox: Collection[str] = TOOLBOX,
    numeric: Collection[str] = NUMERIC_TOOLS,
) -> float:
    """Lang2Act Eq. 13, ``I_valid(z | T_box)``: 1.0 iff the strict format holds, there is at
    least one tool, every ``<tool`` opening of the response (attributes in any order) is a
    well-formed ``name=.. args=..`` call inside ``<description>`` of a toolbox tool, and every
    tool not in ``numeric`` has args starting ``Image k:`` with all referenced ids in 1..num_images.

    >>> ok = '<think>Image 1.</think><description><tool name="read_text_element" args="Image 1: t">x</tool>'
    >>> tool_validity(ok + "</description><answer>x</answer>", 1)
    1.0
    >>> swapped = ok + '<tool args="Image 1: t" name="bogus">y</tool></description><answer>x</answer>'
    >>> tool_validity(swapped, 1)
    0.0
    """
    fmt = check_strict_format(response)
    if not fmt.valid:
        return 0.0
    description = fmt.parsed["description"]
    tools = [ToolCall(t.name.strip(), t.args.strip(), t.body.strip()) for t in quoted_tool_calls(description)]
    if not tools or len(tools) != len(_ANY_TOOL_OPEN.findall(response)):
        return 0.0
    for tool in tools:
        if tool.name not in toolbox:
            return 0.0
        if tool.name in numeric:
            continue
        ids = _image_ids(tool.args)
        if not _ARGS_PREFIX.match(tool.args) or not ids or not all(1 <= i <= num_images for i in ids):
            return 0.0
    return 1.0


def parse_generation(response: str) -> dict[str, str | None]:
    """actionrl.py: first non-greedy ``<think>``/``<description>``/``<answer>`` (IGNORECASE), stripped."""
    out: dict[str, str | None] = {}
    for tag in TAGS:
        block = first_block(response, f"<{tag}>", f"</{tag}>", ignore_case=True)
        out[tag] = block.strip() if block is not None else None
    return out


def actionrl_format_score(response: str) -> float:
    """Stage-1 format: 1.0 iff all three blocks exist with non-empty content (order unchecked)."""
    parsed = parse_generation(response if isinstance(response, str) else "")
    return 1.0 if all(parsed[tag] for tag in TAGS) else 0.0
