"""Parsers for every box syntax the papers' models write, plus tag extraction.

Model output is data, never an exception: every parser here is total. A box that cannot be
read comes back as a ``ParsedBox`` with ``box=None`` and ``error`` set, so rewards and metrics
can count malformed output instead of crashing a training step.

Syntaxes (the caller says which ``CoordSpace`` the numbers are in):

* LAT: ``Bounding box: {"bbox_2d": [x1, y1, x2, y2], "Image_index": k}`` (JSON-ish: keys in any
  case, single quotes tolerated, and the cold-start variant ``(bbox_2d: (...), Image_index: k)``);
* VISA: ``Target Document: k`` + ``Bounding Box: (x1, y1), (x2, y2)``;
* VRAG-RL: ``<bbox>[x1, y1, x2, y2]</bbox>``;
* Qwen2-VL: ``<|box_start|>(x1,y1),(x2,y2)<|box_end|>`` (0-1000).

Page indices in the text are 1-based; ``ParsedBox.page_index`` is 0-based.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Literal, overload

from evidra.core.tagscan import find_blocks, parse_digits
from evidra.core.types import Box, CoordSpace

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LAT_GROUP = re.compile(r"\{[^{}]*\}|\((?:[^()]|\([^()]*\))*\)", re.DOTALL)
_LAT_BBOX = re.compile(r"""bbox_2d['"]?\s*:\s*[\[(]([^\])]*)[\])]""", re.IGNORECASE)
_LAT_INDEX = re.compile(r"""image_index['"]?\s*:\s*['"]?\s*([-+]?\d+)""", re.IGNORECASE)
_VISA_DOC = re.compile(r"Target\s+Document\s*:\s*\[?\s*(\d+)", re.IGNORECASE)
_VISA_BOX = re.compile(
    rf"Bounding\s+Box\s*:\s*\[?\s*\(\s*({_NUM})\s*,\s*({_NUM})\s*\)\s*,?\s*\(\s*({_NUM})\s*,\s*({_NUM})\s*\)",
    re.IGNORECASE,
)
_QWEN2_BOX = re.compile(
    rf"<\|box_start\|>\s*\(\s*({_NUM})\s*,\s*({_NUM})\s*\)\s*,\s*\(\s*({_NUM})\s*,\s*({_NUM})\s*\)\s*<\|box_end\|>"
)


@dataclass(frozen=True)
class ParsedBox:
    """One box read from model text: the box (or why not), its page, and where it was written."""

    box: Box | None
    page_index: int | None  # 0-based; None when the syntax names no page
    raw: str
    start: int
    end: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.box is not None and self.error is None


def _to_numbers(parts: list[str]) -> list[float] | None:
    try:
        values = [float(p) for p in parts]
    except ValueError:
        return None
    return values if all(math.isfinite(v) for v in values) else None


def make_box(values: list[float] | None, space: CoordSpace) -> tuple[Box | None, str | None]:
    """A ``Box`` from four numbers, or the reason there is none (never raises)."""
    if values is None:
        return None, "coordinates are not finite numbers"
    if len(values) != 4:
        return None, f"expected 4 coordinates, got {len(values)}"
    x1, y1, x2, y2 = values
    if x2 < x1 or y2 < y1:
        return None, f"inverted box ({x1}, {y1}, {x2}, {y2})"
    return Box(x1, y1, x2, y2, space), None


def _page_from_one_based(k: int | None) -> tuple[int | None, str | None]:
    if k is None:
        return None, None
    if k < 1:
        return None, f"page index {k} is not 1-based"
    return k - 1, None


def parse_lat_boxes(text: str, space: CoordSpace = CoordSpace.PAGE) -> list[ParsedBox]:
    """All LAT-style boxes in ``text`` (any ``{..}`` or ``(..)`` group with a ``bbox_2d`` key).

    >>> b = parse_lat_boxes('Bounding box: {"bbox_2d": [1, 2, 30, 40], "Image_index": 2}')[0]
    >>> b.box.as_tuple(), b.page_index
    ((1.0, 2.0, 30.0, 40.0), 1)
    >>> parse_lat_boxes("(bbox_2d: (5, 6, 7, 8), Image_index: 1)")[0].box.as_tuple()
    (5.0, 6.0, 7.0, 8.0)
    """
    out: list[ParsedBox] = []
    for group in _LAT_GROUP.finditer(text):
        raw = group.group()
        bbox_m = _LAT_BBOX.search(raw)
        if bbox_m is None:
            continue
        values = _to_numbers([p.strip().strip("'\"") for p in bbox_m.group(1).split(",") if p.strip()])
        box, error = make_box(values, space)
        index_m = _LAT_INDEX.search(raw)
        k = parse_digits(index_m.group(1)) if index_m else None
        page, page_error = _page_from_one_based(k)
        if index_m is None:
            page_error = "missing Image_index"
        elif k is None:
            page_error = f"Image_index {index_m.group(1)[:20]}... is not a page number"
        out.append(ParsedBox(box, page, raw, group.start(), group.end(), error or page_error))
    return out


def _visa_page(digits: str) -> tuple[int | None, str | None]:
    k = parse_digits(digits)
    if k is None:
        return None, f"document {digits[:20]}... is not a page number"
    return _page_from_one_based(k)


def parse_visa_box(text: str, space: CoordSpace = CoordSpace.PAGE) -> ParsedBox | None:
    """VISA's ``Target Document: k`` / ``Bounding Box: (x1, y1), (x2, y2)``; None if absent.

    >>> b = parse_visa_box("Answer: x\\nTarget Document: 2\\nBounding Box: (10, 20), (30, 40)")
    >>> b.box.as_tuple(), b.page_index
    ((10.0, 20.0, 30.0, 40.0), 1)
    """
    box_m = _VISA_BOX.search(text)
    doc_m = _VISA_DOC.search(text)
    if box_m is None:
        if doc_m is None:
            return None
        page, err = _visa_page(doc_m.group(1))
        return ParsedBox(None, page, doc_m.group(), doc_m.start(), doc_m.end(), err or "missing Bounding Box")
    box, error = make_box(_to_numbers(list(box_m.groups())), space)
    page, page_error = _visa_page(doc_m.group(1)) if doc_m else (None, None)
    return ParsedBox(box, page, box_m.group(), box_m.start(), box_m.end(), error or page_error)


def parse_vrag_boxes(text: str, space: CoordSpace = CoordSpace.MODEL) -> list[ParsedBox]:
    """Every ``<bbox>[x1, y1, x2, y2]</bbox>`` (VRAG-RL; pixels of the image as displayed).

    >>> parse_vrag_boxes("<bbox>[1, 2, 3, 4]</bbox><bbox>oops</bbox>")[1].error
    'bbox content is not a JSON list of numbers'
    """
    out: list[ParsedBox] = []
    for m in find_blocks(text, "<bbox>", "</bbox>"):  # <bbox>(.*?)</bbox>, DOTALL
        values: list[float] | None = None
        try:
            data = json.loads(m.body())
        except (ValueError, RecursionError):
            data = None
        if isinstance(data, list) and all(
            isinstance(v, (int, float)) and not isinstance(v, bool) for v in data
        ):
            values = _to_numbers([repr(v) for v in data])
            box, error = make_box(values, space)
        else:
            box, error = None, "bbox content is not a JSON list of numbers"
        out.append(ParsedBox(box, None, m.group(), m.start, m.end, error))
    return out


def parse_qwen2_boxes(text: str, space: CoordSpace = CoordSpace.NORM1000) -> list[ParsedBox]:
    """Every ``<|box_start|>(x1,y1),(x2,y2)<|box_end|>`` (Qwen2-VL grounding, 0-1000).

    >>> parse_qwen2_boxes("<|box_start|>(100,200),(300,400)<|box_end|>")[0].box.as_tuple()
    (100.0, 200.0, 300.0, 400.0)
    """
    out: list[ParsedBox] = []
    for m in _QWEN2_BOX.finditer(text):
        box, error = make_box(_to_numbers(list(m.groups())), space)
        out.append(ParsedBox(box, None, m.group(), m.start(), m.end(), error))
    return out


def _tag_blocks(text: str, tag: str, ignore_case: bool) -> list[str]:
    """Top-level ``<tag>...</tag>`` blocks; nested same-name tags stay inside their parent and
    an unclosed block runs to the end of the text (truncated generation)."""
    flags = re.IGNORECASE if ignore_case else 0
    token = re.compile(rf"<(/?){re.escape(tag)}>", flags)
    blocks: list[str] = []
    depth, start = 0, 0
    for m in token.finditer(text):
        if not m.group(1):
            if depth == 0:
                start = m.end()
            depth += 1
        elif depth > 0:
            depth -= 1
            if depth == 0:
                blocks.append(text[start : m.start()])
    if depth > 0:
        blocks.append(text[start:])
    return blocks


@overload
def extract_tag(
    text: str, tag: str, which: Literal["first", "last"] = ..., *, ignore_case: bool = ...
) -> str | None: ...
@overload
def extract_tag(text: str, tag: str, which: Literal["all"], *, ignore_case: bool = ...) -> list[str]: ...
def extract_tag(
    text: str, tag: str, which: Literal["first", "last", "all"] = "first", *, ignore_case: bool = False
) -> str | list[str] | None:
    """Content of ``<tag>...</tag>`` blocks: the first, the last, or all top-level ones.

    Tolerant of truncation (an unclosed block runs to the end), nesting (inner same-name tags
    stay in the outer block) and repeats. A stray closing tag is ignored. Never raises.

    >>> extract_tag("<a>x</a><a>y", "a", "all")
    ['x', 'y']
    >>> extract_tag("<a>1<a>2</a>3</a>", "a")
    '1<a>2</a>3'
    >>> extract_tag("no tags", "a") is None
    True
    """
    blocks = _tag_blocks(text, tag, ignore_case)
    if which == "all":
        return blocks
    if not blocks:
        return None
    return blocks[0] if which == "first" else blocks[-1]
