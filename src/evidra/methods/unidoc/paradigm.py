"""UniDoc-RL's hierarchical agent: search -> select -> bbox -> answer (UniDoc-RL §3; the released
system prompt of its SFT data and RL rollout).

One policy turn holds ``<think>...</think>`` and one action, the first complete ``<search>``,
``<select>``, ``<bbox>`` or ``<answer>`` block, as the released rollout reads it. A search shows
up to three candidate pages numbered from 0; ``<select>i</select>`` keeps candidate i; ``<bbox>``
crops one region of the selected page (pixel frame of the last image shown); ``<answer>`` ends
the episode. What the policy read from an image goes into ``<information>...</information>``, which
the format reward asks for (it is no action). The parser never raises: malformed output is an
action with an error, or no action.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.tagscan import find_named_blocks, finite_float, parse_digits
from evidra.core.types import Action, Box, CoordSpace, Message, Page, Parsed, Sample
from evidra.paradigms.paradigm import PARADIGMS, first_tag

ACTIONS = ("search", "select", "bbox", "answer")
MAX_INDEX_DIGITS = 3  # a candidate index of more digits names no candidate (never converted)
MAX_BOX_CHARS = 400  # a <bbox> argument longer than this is not read as JSON

# The released system prompt's steps (SFT data and RL rollout), in our words; one region per <bbox>
# here, where the released prompt lets one <bbox> list several regions.
UNIDOC_SYSTEM = """Answer the user's question by following these steps strictly.

1. Reason first. Whenever you receive new information, reason inside <think> and </think> about whether you can already answer the question.

2. Search if needed. If information is missing, search for document images with <search>query</search>. The system returns a few images, numbered from 0.

3. Analyse and select. Inside <think>, examine each returned image in turn for text, charts, tables, labels or other visual content relevant to the question, judge how complete and relevant each one is, and choose the single most helpful image. Give its number in a <select> tag, for example <select>2</select>.

4. Read the selected image. Inside <think>, name the regions of interest [x1, y1, x2, y2] relevant to the question, summarise each, and judge whether it is readable.
   - If it is readable, write what it tells you inside <information> and </information>.
   - If a region needs magnification, request it with <bbox>[x1, y1, x2, y2]</bbox> (one region per <bbox>) and wait. Magnify only when enlarging the region helps answer more clearly and accurately.

5. Read a magnified region. After a magnified image arrives, analyse it inside <think> and write what it shows inside <information> and </information>, based on the magnified region alone.

6. Decide. Inside <think>, judge whether the information gathered suffices and what is still missing. Then write exactly one of: <search>a precise follow-up query</search> if it does not suffice, or <answer>the direct final answer</answer> if it does.

7. Repeat steps 3 to 6 until you can give a complete and accurate final answer."""  # noqa: E501
USER_TEMPLATE = "User question: {question}"


def parse_select(argument: str) -> int | None:
    """The candidate index of a ``<select>`` argument (a whole number from 0), or None.

    >>> parse_select(" 2 "), parse_select("-1"), parse_select("9" * 50), parse_select("two")
    (2, None, None, None)
    """
    value = parse_digits(argument.strip(), MAX_INDEX_DIGITS)
    return value if value is not None and value >= 0 else None


def parse_region(argument: str) -> Box | None:
    """One region ``[x1, y1, x2, y2]`` (or the released list form holding one region,
    ``[[x1, y1, x2, y2]]``) of non-negative finite numbers with x1 < x2 and y1 < y2, else None.

    >>> parse_region("[1, 2, 30, 40]").as_tuple(), parse_region("[[1, 2, 30, 40]]").as_tuple()
    ((1.0, 2.0, 30.0, 40.0), (1.0, 2.0, 30.0, 40.0))
    >>> parse_region("[[1, 2, 3, 4], [5, 6, 7, 8]]") is None, parse_region("[3, 0, 1, 5]") is None
    (True, True)
    """
    if len(argument) > MAX_BOX_CHARS:
        return None
    try:
        value = json.loads(argument)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], list):
        value = value[0]
    if not isinstance(value, list) or len(value) != 4 or any(isinstance(v, bool) for v in value):
        return None
    coords = [finite_float(v) if isinstance(v, int | float) else None for v in value]
    if any(c is None or c < 0 for c in coords):
        return None
    x1, y1, x2, y2 = (float(c) for c in coords if c is not None)
    if x1 >= x2 or y1 >= y2:
        return None
    return Box(x1, y1, x2, y2, space=CoordSpace.MODEL)


def _action_errors(name: str, argument: str) -> tuple[Box | None, list[str]]:
    if name == "bbox":
        box = parse_region(argument)
        error = f"invalid <bbox> {argument[:80]!r}: expected one region [x1, y1, x2, y2] with x1<x2, y1<y2"
        return box, [] if box is not None else [error]
    if name == "select" and parse_select(argument) is None:
        return None, [f"invalid <select> {argument[:40]!r}: expected an image number such as 0"]
    if name == "search" and not argument:
        return None, ["empty <search> query"]
    return None, []


def parse_unidoc(text: str) -> Parsed:
    """``<think>``, ``<information>`` and the first action block of one turn; never raises."""
    fields: dict[str, str] = {}
    errors: list[str] = []
    for tag in ("think", "information"):
        content = first_tag(text, tag)
        if content is not None:
            fields[tag] = content
    if "think" not in fields:
        errors.append("missing <think>...</think>")
    match = next(find_named_blocks(text, ACTIONS), None)
    if match is None:
        errors.append("no action: expected one of <search>, <select>, <bbox>, <answer>")
        return Parsed(text=text, fields=fields, errors=tuple(errors))
    name, argument = match.head.group(1), match.body().strip()
    box, action_errors = _action_errors(name, argument)
    return Parsed(
        text=text,
        answer=argument if name == "answer" else None,
        action=Action(name, argument, box),
        fields=fields,
        errors=(*errors, *action_errors),
    )


@dataclass(frozen=True)
class UniDocAgent:
    """UniDoc-RL's prompt; pages arrive as observations from ``evidra.methods.unidoc.env``."""

    name: str = "unidoc"
    system_prompt: str = UNIDOC_SYSTEM

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        """The prompt carries no page: the agent must search (``pages`` is ignored)."""
        return [
            Message.text("system", self.system_prompt),
            Message.text("user", USER_TEMPLATE.format(question=sample.question)),
        ]

    def parse(self, text: str) -> Parsed:
        return parse_unidoc(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("answer", "retrieval", "select", "crop", "format")


PARADIGMS.add("unidoc", UniDocAgent)
