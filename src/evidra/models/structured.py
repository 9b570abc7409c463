"""Structured answers: a JSON answer whose every step cites a page and a box, always readable.

A general instruct model does not reliably write a paper's output format, but it (or its server)
can write JSON to a schema. ``ANSWER_SCHEMA`` is that schema: the answer (``null`` when the pages
do not answer the question) and its steps, each with the 1-based image it cites (or a page id)
and a box of four numbers in the model's own box convention (``evidra.core.box_formats`` maps it
to page pixels). ``response_format()`` asks an OpenAI-compatible server to keep to it (vLLM,
SGLang and OpenAI do), ``build_messages`` shows the pages and asks for it, and ``parse`` reads a
reply into ``Parsed`` without ever raising: malformed JSON is an answer with errors, not an
exception. A ``null`` answer reads as ``"No answer"``, as LAT's format writes it; a reply without
a readable answer has ``answer`` None.

>>> parsed = parse('{"answer": "Lyon", "steps": [{"text": "founded in Lyon", "page": 1, '
...                '"box": [10, 20, 300, 60]}]}', ["p1"])
>>> parsed.answer, parsed.steps[0].page_index, parsed.steps[0].box.as_tuple(), parsed.errors
('Lyon', 0, (10.0, 20.0, 300.0, 60.0), ())
>>> parse('{"answer": "Lyon", "steps": [', ["p1"]).errors[0].split(":")[:2]
['the answer is not JSON', ' JSONDecodeError']
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence

from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.types import Box, CoordSpace, ImagePart, Message, Page, Parsed, Step, TextPart

MAX_STEPS = 32  # steps read from one answer; more are cut (and said so)
MAX_TEXT = 4000  # characters kept of one step's text or of the answer
NO_ANSWER = "No answer"  # a null answer: the pages do not answer the question (as LAT's format says it)

ANSWER_SCHEMA: JSONObject = {
    "type": "object",
    "properties": {
        "answer": {"type": ["string", "null"]},
        "steps": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "page": {"type": ["integer", "string"]},
                    "box": {"type": "array", "items": {"type": "number"}, "minItems": 4, "maxItems": 4},
                },
                "required": ["text", "page", "box"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["answer", "steps"],
    "additionalProperties": False,
}

INSTRUCTION = (
    "Answer the question from the document images above. Reply with one JSON object and nothing "
    'else: {"answer": <the answer as a short string, or null when the images do not answer the '
    'question>, "steps": [{"text": <one fact you read>, "page": <the image number it is on, from '
    '1>, "box": <the region of that image holding the fact: four numbers, in the order and the '
    "coordinates in which you write bounding boxes>}, ...]}. Every step cites the image and the box "
    "of its evidence."
)
# The box's order and frame are left to the model on purpose: each family writes its own
# (Gemini y-first, Qwen2.5-VL in resized pixels, ...), and evidra.core.box_formats reads each one.
_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL)


def response_format() -> JSONObject:
    """The ``response_format`` of a chat-completions request that holds the reply to the schema."""
    return {"type": "json_schema", "json_schema": {"name": "evidra_answer", "schema": ANSWER_SCHEMA}}


def build_messages(question: str, pages: Sequence[Page]) -> list[Message]:
    """One user message: ``Image k:`` and each page's image in order, the question, the instruction."""
    parts: list[TextPart | ImagePart] = []
    for k, page in enumerate(pages, 1):
        parts += [TextPart(f"Image {k}:"), ImagePart(page.image_path, page_id=page.id)]
    parts += [TextPart(f"Question: {question.strip()}"), TextPart(INSTRUCTION)]
    return [Message("user", tuple(parts))]


def parse(text: str, page_ids: Sequence[str]) -> Parsed:
    """``text`` (a JSON answer; a ```json fence around it is allowed) as ``Parsed``; never raises.

    A step's ``page`` is the 1-based number of an image shown or one of ``page_ids``; its box is
    kept in the model's frame (``CoordSpace.MODEL``: the model's box format places it). What
    cannot be read is left out of the result and named in ``errors``."""
    data, error = _load(text)
    if error is not None:
        return Parsed(text=text, errors=(error,))
    if not isinstance(data, Mapping):
        return Parsed(text=text, errors=(f"the answer is JSON {type(data).__name__}, not an object",))
    errors: list[str] = []
    answer = _answer(data["answer"], errors) if "answer" in data else None
    if "answer" not in data:
        errors.append("no answer field")
    steps = _steps(data.get("steps", []), page_ids, errors)
    return Parsed(text=text, answer=answer, steps=tuple(steps), errors=tuple(errors))


def _load(text: str) -> tuple[JSON, str | None]:
    fenced = _FENCE.match(text)
    body = fenced.group(1) if fenced else text.strip()
    if not body:
        return None, "the answer is empty"
    try:
        # strict=False: a raw control character inside a string (a tab) is read, as grammars allow it
        data: JSON = json.loads(body, parse_constant=_no_constant, strict=False)
    except (ValueError, RecursionError) as exc:
        return None, f"the answer is not JSON: {type(exc).__name__}: {str(exc)[:120]}"
    return data, None


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _answer(value: object, errors: list[str]) -> str | None:
    if value is None:
        return NO_ANSWER
    if isinstance(value, str):
        return value[:MAX_TEXT]
    errors.append(f"answer is {type(value).__name__}, not a string or null")
    return None


def _steps(value: object, page_ids: Sequence[str], errors: list[str]) -> list[Step]:
    if not isinstance(value, list):
        errors.append(f"steps is {type(value).__name__}, not a list")
        return []
    if len(value) > MAX_STEPS:
        errors.append(f"{len(value)} steps; the first {MAX_STEPS} are read")
    out = []
    for i, raw in enumerate(value[:MAX_STEPS], 1):
        if not isinstance(raw, Mapping):
            errors.append(f"step {i} is {type(raw).__name__}, not an object")
            continue
        text = raw.get("text")
        if not isinstance(text, str):
            errors.append(f"step {i} has no text")
            text = ""
        page = _page(raw.get("page"), page_ids, i, errors)
        out.append(Step(text[:MAX_TEXT], page, _box(raw.get("box"), i, errors)))
    return out


def _page(value: object, page_ids: Sequence[str], step: int, errors: list[str]) -> int | None:
    """The 0-based index of the page ``value`` names: an image number from 1, or a page id."""
    if isinstance(value, str) and value in page_ids:
        return list(page_ids).index(value)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= len(page_ids):
        return value - 1
    if value is not None:
        errors.append(f"step {step} cites page {str(value)[:40]!r}, not one of the {len(page_ids)} images")
    return None


def _box(value: object, step: int, errors: list[str]) -> Box | None:
    """Four finite numbers, as written (the model's frame and order), or None with an error."""
    if value is None:
        return None
    numbers = value if isinstance(value, list) else []
    if len(numbers) != 4 or not all(_finite(v) for v in numbers):
        errors.append(f"step {step} box {str(value)[:60]} is not four finite numbers")
        return None
    x1, y1, x2, y2 = (float(v) for v in numbers)
    if x2 < x1 or y2 < y1:
        errors.append(f"step {step} box {numbers} is inverted")
        return None
    return Box(x1, y1, x2, y2, CoordSpace.MODEL)


def _finite(v: object) -> bool:
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:  # an integer too large for a float
        return False
