"""CAVE's interleaved zoom agent: reason, zoom into a region of the image, answer (CAVE §3.1).

CAVE cold-starts from DeepEyes-style interleaved data (CAVE App. D.1), so the action format is
DeepEyes' zoom tool call: ``<tool_call>{"name": "image_zoom_in_tool", "arguments":
{"bbox_2d": [x1, y1, x2, y2]}}</tool_call>`` with the box in pixels of the original image, and
``<answer>...</answer>`` to finish. The seed does not print its prompt; ``ZOOM_SYSTEM`` is our
faithful wording of that interface (docs/agents.md says so).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.jsonvalue import JSON
from evidra.core.tagscan import find_blocks, finite_float
from evidra.core.types import Action, Box, CoordSpace, ImagePart, Message, Page, Parsed, Sample, TextPart
from evidra.paradigms.paradigm import PARADIGMS, first_tag

TOOL_NAME = "image_zoom_in_tool"
ZOOM_SYSTEM = (
    "You are a careful visual reasoner. Answer the question about the image. Reason step by step "
    "inside <think> and </think>. When a detail is too small or unclear, zoom into a region of the "
    "original image by calling the tool:\n"
    '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [x1, y1, x2, y2]}}</tool_call>\n'
    "where (x1, y1) and (x2, y2) are the top-left and bottom-right corners in pixels of the original "
    "image. The zoomed region is returned inside <tool_response> and </tool_response>. Call the tool "
    "once per turn. When you have gathered enough visual evidence, give the final answer inside "
    "<answer> and </answer>, for example <answer> 42 </answer>."
)


def parse_zoom_call(payload: str) -> tuple[Box | None, str | None]:
    """``(box, error)`` of a tool-call JSON payload; never raises on model output."""
    try:
        call: JSON = json.loads(payload)
    except (ValueError, RecursionError):
        return None, "the tool call is not valid JSON"
    if not isinstance(call, dict) or call.get("name") != TOOL_NAME:
        return None, f"unknown tool; the only tool is {TOOL_NAME}"
    args = call.get("arguments")
    raw: JSON = args.get("bbox_2d") if isinstance(args, dict) else None
    if not isinstance(raw, list) or len(raw) != 4:
        return None, "arguments.bbox_2d must be a list [x1, y1, x2, y2]"
    coords = [finite_float(v) for v in raw if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if len(coords) != 4 or None in coords:
        return None, "bbox_2d values must be finite numbers"
    x1, y1, x2, y2 = (v for v in coords if v is not None)
    if min(x1, y1) < 0 or x1 >= x2 or y1 >= y2:
        return None, "bbox_2d needs 0 <= x1 < x2 and 0 <= y1 < y2"
    return Box(x1, y1, x2, y2, space=CoordSpace.PAGE), None


def parse_zoom_turn(text: str) -> Parsed:
    """The first ``<tool_call>`` or ``<answer>`` of a turn (whichever comes first) + ``<think>``."""
    errors: list[str] = []
    think = first_tag(text, "think")
    fields = {"think": think} if think is not None else {}
    if think is None:
        errors.append("missing <think>...</think>")
    call = next(find_blocks(text, "<tool_call>", "</tool_call>"), None)
    answer = next(find_blocks(text, "<answer>", "</answer>"), None)
    if answer is not None and (call is None or answer.start < call.start):
        body = answer.body().strip()
        return Parsed(
            text=text, answer=body, action=Action("answer", body), fields=fields, errors=tuple(errors)
        )
    if call is None:
        errors.append("no action: expected <tool_call>...</tool_call> or <answer>...</answer>")
        return Parsed(text=text, fields=fields, errors=tuple(errors))
    box, error = parse_zoom_call(call.body())
    if error is not None:
        errors.append(error)
    return Parsed(
        text=text, action=Action("zoom", call.body().strip(), box), fields=fields, errors=tuple(errors)
    )


@dataclass(frozen=True)
class ZoomAgent:
    """One image and a question; the environment answers zoom calls with crops."""

    name: str = "zoom_agent"
    system_prompt: str = ZOOM_SYSTEM

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        page = (list(pages) or list(sample.pages))[0]
        size = f"The image is {page.width} x {page.height} pixels."
        parts = (
            ImagePart(page.image_path, page_id=page.id),
            TextPart(f"{size}\nQuestion: {sample.question}"),
        )
        return [Message.text("system", self.system_prompt), Message("user", parts)]

    def parse(self, text: str) -> Parsed:
        return parse_zoom_turn(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("accuracy", "format", "belief", "evidence", "focus")


PARADIGMS.add("zoom_agent", ZoomAgent)
