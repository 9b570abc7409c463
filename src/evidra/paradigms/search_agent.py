"""VRAG-RL's search agent: think, then search, crop or answer (VRAG-RL §2.1-2.2, App. I.4).

One policy turn holds ``<think>...</think>`` and one action. The action is the *first*
``<search>``, ``<bbox>`` or ``<answer>`` block of the turn, as the released rollout reads it
(the released code); the environment (``evidra.env.search``) executes it. A ``<bbox>`` must
be a JSON list of four non-negative numbers (the released ``validate_bbox_action``), in the
pixel frame of the last image shown.

``with_fetch`` adds ALDEN's ``<fetch>`` action (open a page by its number; ``evidra.env.search``
with ``fetch=True``) to the actions and one sentence about it to the prompt.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from evidra.core.jsonvalue import JSON
from evidra.core.tagscan import find_named_blocks, finite_float
from evidra.core.types import Action, Box, CoordSpace, Message, Page, Parsed, Sample
from evidra.paradigms.paradigm import PARADIGMS, first_tag

# VRAG-RL, Appendix I.4 (Figure 9), system prompt verbatim (its typos included).
VRAGRL_SYSTEM = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every "
    "time you get new information. After reasoning, if you find you lack some knowledge, you can call "
    "a search engine by <search> query </search> and user will return the searched results. Every time "
    "you retrieve an image, you have the option to crop it to obtain a clearer view, the format for "
    "coordinates is <bbox>[x1, y1, x2, y2]</bbox>. You can search as many times as your want. If you "
    "find no further external knowledge needed, you can directly provide the answer inside <answer> "
    "and </answer>, without detailed illustrations. For example, <answer> Beijing </answer>."
)
USER_TEMPLATE = "Query: {question}"  # App. I, "User Prompt: Query: {Query Description}"

_ACTIONS = ("search", "bbox", "answer")  # the blocks of <(search|bbox|answer)>(.*?)</\1>

# ALDEN's fetch action; its prompt wording is not public, so this sentence is ours.
FETCH_PROMPT = (
    "You can also open a page of the document directly by its page number, counting from 1, with "
    "<fetch> page number </fetch>, for example <fetch> 3 </fetch>."
)


def parse_action(text: str, names: tuple[str, ...] = ("search", "bbox", "answer")) -> Parsed:
    """The first complete action block among ``names`` plus ``<think>``; never raises.

    A ``<bbox>`` whose content is not four non-negative numbers becomes an action with no box
    and an error, so the environment can answer with its invalid-action message.
    """
    errors: list[str] = []
    fields: dict[str, str] = {}
    think = first_tag(text, "think")
    if think is None:
        errors.append("missing <think>...</think>")
    else:
        fields["think"] = think
    scanned = (*_ACTIONS, "fetch") if "fetch" in names else _ACTIONS  # without fetch: the released scan
    match = next((b for b in find_named_blocks(text, scanned) if b.head.group(1) in names), None)
    if match is None:
        errors.append(f"no action: expected one of {', '.join(f'<{n}>' for n in names)}")
        return Parsed(text=text, fields=fields, errors=tuple(errors))
    name, argument = match.head.group(1), match.body().strip()
    box = None
    if name == "bbox":
        values = validate_bbox_action(argument)
        numbers = [finite_float(v) for v in values] if values != "INVALID" else []
        coords = [v for v in numbers if v is not None]  # a JSON integer of 400 digits is no number
        if len(numbers) != 4 or len(coords) != 4 or coords[0] >= coords[2] or coords[1] >= coords[3]:
            errors.append(f"invalid <bbox> {argument[:80]!r}: expected [x1, y1, x2, y2] with x1<x2, y1<y2")
        else:
            box = Box(coords[0], coords[1], coords[2], coords[3], space=CoordSpace.MODEL)
    if name == "search" and not argument:
        errors.append("empty <search> query")
    if name == "fetch" and not argument:
        errors.append("empty <fetch> page number")
    answer = argument if name == "answer" else None
    return Parsed(
        text=text, answer=answer, action=Action(name, argument, box), fields=fields, errors=tuple(errors)
    )


@dataclass(frozen=True)
class SearchAgent:
    """The VRAG-RL prompt; pages arrive as observations from the search environment."""

    name: str = "search_agent"
    system_prompt: str = VRAGRL_SYSTEM
    actions: tuple[str, ...] = ("search", "bbox", "answer")

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        """The prompt carries no page: the agent must search (``pages`` is ignored)."""
        return [
            Message.text("system", self.system_prompt),
            Message.text("user", USER_TEMPLATE.format(question=sample.question)),
        ]

    def parse(self, text: str) -> Parsed:
        return parse_action(text, self.actions)

    def reward_names(self) -> tuple[str, ...]:
        return ("retrieval", "answer", "pattern")


def with_fetch(agent: SearchAgent) -> SearchAgent:
    """``agent`` that also reads ``<fetch>`` and whose system prompt says so (unchanged if it does)."""
    if "fetch" in agent.actions:
        return agent
    return replace(
        agent, system_prompt=f"{agent.system_prompt} {FETCH_PROMPT}", actions=(*agent.actions, "fetch")
    )


PARADIGMS.add("search_agent", SearchAgent)


def validate_bbox_action(content: str) -> list[float] | Literal["INVALID"]:
    """Released ``<bbox>`` check: a JSON list of 4 values all ``>= 0``, else ``"INVALID"``.

    No ``x1 < x2`` check and no upper bound, as released; any parse or comparison error is
    an invalid action (the environment then inserts its invalid-action message).
    """
    try:
        value: JSON = json.loads(content)
    except Exception:  # upstream: a bare except around parse + comparison
        return "INVALID"
    if not isinstance(value, list):  # an object or text of 4 fails upstream's ``>= 0`` comparison
        return "INVALID"
    # what upstream's ``>= 0`` accepts without a TypeError: numbers (true and false among them)
    numbers = [x for x in value if isinstance(x, (int, float))]
    if len(value) == 4 == len(numbers) and all(x >= 0 for x in numbers):
        return numbers
    return "INVALID"
