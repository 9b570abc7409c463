"""Reading a LAT response: the answer, its cited boxes, and the chain of evidence as steps.

LAT's output grammar (``<think>step. Bounding box: {"bbox_2d": [..], "Image_index": k} ...
</think><answer>ans Bounding box: {...}</answer>``, boxes in pixels of the ORIGINAL page) is
parsed here, apart from the reward equations in ``evidra.methods.lat.rules``: cutting a
response into (crop, step text) queries is also what the similarity services
(``evidra.methods.lat.similarity``) and the LAT RL recipe build on.

``plan_steps_upstream`` segments ``<think>`` as ``step_reward`` in LAT's ``src/grpo.py`` does;
``plan_steps_paper`` follows LAT Eq. 1. Neither raises on model output: a step that cannot be
scored keeps its reason in ``StepCitation.error``.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import regex

from evidra.core.geometry import is_valid_box
from evidra.core.tagscan import BlockScanner, find_blocks, first_block
from evidra.core.types import CoordSpace
from evidra.methods.lat.upstream_boxes import lat_read_json_box, py_int, py_int_list
from evidra.rewards.boxes import extract_tag, parse_lat_boxes

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

logger = logging.getLogger(__name__)

# Box citations: the released patterns ``Bounding box:\s*\{.*?\}(,\s*\{.*?\})*`` and
# ``Bounding box:\s*(\{.*?\})`` (no DOTALL) are found from this head by ``evidra.core.tagscan``, in
# linear time where the lazy groups rescan a line of unclosed citations from every start.
BOX_HEAD = regex.compile(r"Bounding box:\s*\{")
_MORE_BOXES = regex.compile(r",\s*\{[^}\n]*\}")  # one more ``,\s*\{.*?\}`` of a list
_SENTENCE_SPLIT = regex.compile(r"\. |\n")
_BOX_LABEL = regex.compile(r"bounding\s*box\s*:?\s*$", regex.IGNORECASE)
_BOX_LABELS = regex.compile(r"bounding\s*box(?:es)?\s*:?|,\s*(?=,|$)", regex.IGNORECASE)
MAX_CROP_ASPECT = 200  # ColQwen2's processor rejects thinner crops; upstream resizes them


# ---- the answer and its citations ------------------------------------------------------------


def answer_text(text: str) -> str | None:
    """First ``<answer>...</answer>`` content (DOTALL), unstripped; None if absent."""
    return first_block(text, "<answer>", "</answer>")


def think_text(text: str) -> str | None:
    """First ``<think>...</think>`` content (DOTALL), unstripped; None if absent."""
    return first_block(text, "<think>", "</think>")


def cut_box_lists(text: str, head: regex.Pattern[str] = BOX_HEAD) -> str:
    r"""``text`` without each ``head .*?\}(,\s*\{.*?\})*`` (no DOTALL): a citation and the
    boxes listed after it, as ``re.sub`` removes them.

    >>> cut_box_lists('a Bounding box: {"x": 1}, {"y": 2}. b')
    'a . b'
    """
    scanner = BlockScanner(text, "}", dotall=False)
    kept, pos = [], 0
    while (block := scanner.next_block(head, pos)) is not None:
        kept.append(text[pos : block.start])
        pos = block.end
        while (more := _MORE_BOXES.match(text, pos)) is not None:
            pos = more.end()
    kept.append(text[pos:])
    return "".join(kept)


def strip_answer_boxes(answer: str) -> str:
    """The answer without its ``Bounding box: {..}(, {..})*`` citations, stripped of spaces/dots."""
    return cut_box_lists(answer).strip().strip(".")


def strip_cited_boxes(answer: str) -> str:
    """Paper mode: the answer without any LAT box in any accepted syntax, nor "Bounding box:"
    labels (case-insensitive), stripped of spaces and dots.

    >>> strip_cited_boxes("Paris.\\nbounding box: (bbox_2d: (1, 2, 3, 4), Image_index: 1)")
    'Paris'
    """
    kept, pos = [], 0
    for parsed in parse_lat_boxes(answer):
        kept.append(answer[pos : parsed.start])
        pos = parsed.end
    kept.append(answer[pos:])
    return _BOX_LABELS.sub(" ", "".join(kept)).strip().strip(".").strip()


# ---- steps of the chain of evidence (LAT Eq. 1) -------------------------------------------------


@dataclass(frozen=True)
class StepCitation:
    """One reasoning step r_t with its cited box: what is scored against what.

    ``crop`` is None when the step cannot be scored (bad box, wrong page, empty text); such a
    step counts with similarity 0. ``page_key`` is the page identity used for the overlap test
    (upstream: the raw JSON ``Image_index`` value, compared with Python ``==``).
    """

    text: str
    box: tuple[float, float, float, float] | None
    page_key: object
    crop: PILImage | None
    error: str | None = None
    page: int | None = None  # 0-based position of the cited page among the candidates, if it has one


@dataclass(frozen=True)
class StepPlan:
    """The steps of one response, before similarity scoring. ``aborted``: upstream raised
    mid-way (a box without a bbox_2d/Image_index key); the reward is then 0 whatever the scores."""

    steps: tuple[StepCitation, ...]
    has_think: bool
    aborted: bool = False

    @property
    def queries(self) -> list[tuple[PILImage, str]]:
        return [(s.crop, s.text) for s in self.steps if s.crop is not None]


def _fit_aspect(crop: PILImage) -> PILImage | None:
    """Resize a crop thinner than 1:200 to 200 px on its long side, as upstream does."""
    w, h = crop.size
    if min(w, h) == 0:
        return None
    if max(w, h) / min(w, h) <= MAX_CROP_ASPECT:
        return crop
    size = (int(w * 200 / h), 200) if h > w else (200, int(h * 200 / w))
    return crop.resize(size) if min(size) > 0 else None


def _crop_upstream(page: PILImage | None, coords: list[int] | None) -> tuple[PILImage | None, str | None]:
    if page is None:
        return None, "page image unavailable"
    if coords is None or len(coords) != 4:
        return None, "bbox is not 4 integers"
    x1, y1, x2, y2 = coords
    w, h = page.size
    if x2 < x1 or y2 < y1:
        return None, "inverted box"
    if not (x1 > 0 and y1 > 0 and x2 < w and y2 < h):
        return None, "box not strictly inside the page"
    return _fit_aspect(page.crop((x1, y1, x2, y2))), None


def _page_position(n_pages: int, index: object, single_image: bool) -> int | None:
    """Which candidate page a released step cites (0-based), or None."""
    if single_image:
        return 0 if n_pages else None
    k = py_int(index)
    if k is None or not -n_pages <= k - 1 < n_pages:
        return None
    return (k - 1) % n_pages  # upstream indexes candidates[k - 1]: k = 0 wraps to the last page


def plan_steps_upstream(text: str, pages: Sequence[PILImage | None], *, single_image: bool) -> StepPlan:
    """Segment <think> at each ``Bounding box: {..}`` as ``step_reward`` in LAT's grpo.py does:
    the query is the last '. '- or newline-separated piece of text since the previous box."""
    think = think_text(text)
    if think is None:
        return StepPlan((), has_think=False)
    steps: list[StepCitation] = []
    previous_end = 0
    for m in find_blocks(think, BOX_HEAD, "}", dotall=False):
        query = _SENTENCE_SPLIT.split(think[previous_end : m.start].strip())[-1].strip()
        previous_end = m.end
        source = think[m.body_start - 1 : m.end]  # the ``{..}`` of the citation
        parsed = lat_read_json_box(source)
        if parsed.status in ("key", "fatal"):
            logger.debug("LAT step box %r aborts the reward (upstream KeyError)", source)
            return StepPlan(tuple(steps), has_think=True, aborted=True)
        coords = py_int_list(parsed.bbox) if parsed.status == "ok" and parsed.bbox is not None else None
        position = _page_position(len(pages), parsed.image_index, single_image)
        crop, error = _crop_upstream(pages[position] if position is not None else None, coords)
        if crop is not None and not query:
            crop, error = None, "empty step text"
        box = tuple(float(c) for c in coords) if coords is not None and len(coords) == 4 else None
        steps.append(StepCitation(query, box, parsed.image_index, crop, error, position))  # type: ignore[arg-type]
    return StepPlan(tuple(steps), has_think=True)


def plan_steps_paper(text: str, pages: Sequence[PILImage | None], *, single_image: bool) -> StepPlan:
    """Segment <think> into steps r_t, each ending at a cited box (B_t, i_t) (LAT Eq. 1).

    r_t is the whole text since the previous box (minus the "Bounding box:" label). A step is
    scored only if its box parses, its page exists and it lies inside the page (non-strict).
    """
    think = extract_tag(text, "think")
    if think is None:
        return StepPlan((), has_think=False)
    steps: list[StepCitation] = []
    previous_end = 0
    for parsed in parse_lat_boxes(think, CoordSpace.PAGE):
        segment = _BOX_LABEL.sub("", think[previous_end : parsed.start].rstrip()).strip()
        previous_end = parsed.end
        page_index = 0 if single_image and parsed.page_index in (None, 0) else parsed.page_index
        page = pages[page_index] if page_index is not None and 0 <= page_index < len(pages) else None
        crop, error = None, parsed.error
        if parsed.ok and parsed.box is not None and page is not None:
            if is_valid_box(parsed.box, *page.size) and segment:
                b = parsed.box
                crop = _fit_aspect(page.crop((round(b.x1), round(b.y1), round(b.x2), round(b.y2))))
                error = None if crop is not None else "box has no area in pixels"
            else:
                error = "box outside the page or empty step text"
        elif error is None:
            error = "page image unavailable"
        box = parsed.box.as_tuple() if parsed.box is not None else None
        position = page_index if page is not None else None
        steps.append(StepCitation(segment, box, page_index, crop, error, position))
    return StepPlan(tuple(steps), has_think=True)
