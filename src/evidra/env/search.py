"""VRAG-RL's search environment: ``<search>`` a page index, ``<bbox>`` crop and zoom, ``<answer>``.

Per turn (VRAG-RL §2.2 and §2.4, Algorithm 1): the first action block of the policy's text is
executed. A search inserts the best page not yet seen in this episode as a user turn holding
the image (resized by VRAG's ``process_image``, so the policy's boxes live in that frame); a
``<bbox>`` crops the region of the raw page that the box covers in the last image shown
(``evidra.core.geometry``) and inserts it, zoomed, the same way; an answer ends the episode. An
invalid action gets an explanatory message and is counted (``StepInfo.invalid``). After
``max_turns`` policy turns without an answer the episode ends (``StepInfo.turn_limit``).

A model of another family writes its box in its own convention (Qwen3-VL on a 0-1000 grid, ...):
with ``box_format`` set (``evidra.core.box_formats``; an evaluation sets the served model's) the
box is first read by it on the last image shown, then cropped as above. Without it (the default,
what training and evidra's own checkpoints use) the box is pixels of that image, as released.

With ``fetch=True`` the policy may also write ALDEN's ``<fetch>N</fetch>``: the page numbered N
(from 1) in the order of the episode's pages (a sample's document, in page order) is inserted as a
search result would be. A page number that is not a whole number, or names no page, is an invalid
action whose one-line message gives the valid range; the prompt says so only when enabled.

Retrieved page ids are recorded in insertion order (``StepInfo.retrieved`` of every step): the
VRAG-RL reward's NDCG (Eq. 7-9) reads them. The index is anything with the retrieval
``search(queries, k, exclude)`` method: ``BM25Retriever``, an engine's retriever, or a
``SearchClient`` to ``evidra serve-index``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Unpack

from evidra.core import imagefiles
from evidra.core.box_formats import BoxFormat, on_shown
from evidra.core.errors import CorpusError, InvalidInputError
from evidra.core.geometry import (
    CROP_RULES,
    VRAG_MAX_PIXELS,
    VRAG_MIN_PIXELS,
    CropMode,
    Displayed,
    crop_displayed,
    process_image_size,
)
from evidra.core.tagscan import parse_digits
from evidra.core.types import ImagePart, Message, Page, Parsed, Sample
from evidra.env.environment import ENVIRONMENTS, SearchRequest, StepFields, StepInfo, StepResult
from evidra.env.environment import Searcher as Searcher  # callers import it from here
from evidra.paradigms.paradigm import Paradigm
from evidra.paradigms.search_agent import SearchAgent, with_fetch

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from evidra.retrieval.encoders.bm25 import BM25Retriever
    from evidra.retrieval.interfaces import Hit

INVALID_MESSAGE = (
    "Your previous action is invalid: {reason}. Think inside <think> and </think>, then write exactly "
    "one action: a search query inside <search> and </search>, a region of the last image inside "
    "<bbox>[x1, y1, x2, y2]</bbox>, or the final answer inside <answer> and </answer>. Please try again."
)
INVALID_FETCH_MESSAGE = (
    "Your previous action is invalid: {reason}. Think inside <think> and </think>, then write exactly "
    "one action: a search query inside <search> and </search>, a page number inside <fetch> and "
    "</fetch>, a region of the last image inside <bbox>[x1, y1, x2, y2]</bbox>, or the final answer "
    "inside <answer> and </answer>. Please try again."
)
MAX_ASPECT_RATIO = 200  # Qwen-VL's image processor refuses an image whose sides differ more than this
MAX_PAGE_DIGITS = 6  # a page number of more digits names no page (and is never converted)
NO_RESULT_MESSAGE = "No new page matches the query <search>{query}</search>; try another query."
UNKNOWN_PAGE_MESSAGE = (
    "The search for <search>{query}</search> returned page {page_id}, which is not in this corpus; "
    "try another query."
)


def bm25_searcher(pages: Iterable[Page]) -> BM25Retriever:
    """An in-process BM25 index over the pages' text layers (fast, no model)."""
    from evidra.retrieval.encoders.bm25 import BM25Retriever

    pages = list(pages)
    if not any(p.words for p in pages):
        raise InvalidInputError("no page has a text layer for BM25; ingest PDFs (or OCR images) first")
    return BM25Retriever.build({p.id: p.text for p in pages}, images={p.id: p.image_path for p in pages})


def too_thin(box: Sequence[float], size: tuple[int, int]) -> str | None:
    """Why a crop shown at ``size`` (w, h) cannot go to a Qwen-VL policy (sides that differ more
    than ``MAX_ASPECT_RATIO``-fold: the processor would raise and end the whole rollout), or None.

    >>> too_thin([10.0, 0.0, 11.0, 300.0], (4, 1200))
    'the box [10, 0, 11, 300] is too thin: its sides differ 300-fold (at most 200)'
    """
    ratio = max(size) / min(size)
    if ratio <= MAX_ASPECT_RATIO:
        return None
    shown = ", ".join(f"{v:g}" for v in box)
    return f"the box [{shown}] is too thin: its sides differ {ratio:.0f}-fold (at most {MAX_ASPECT_RATIO})"


def resized(image: PILImage, size: tuple[int, int]) -> PILImage:
    """The image as displayed: resized to ``size`` (upstream ``process_image``), RGB."""
    out = image.convert("RGB")
    return out if out.size == size else out.resize(size)


@dataclass
class SearchEnv:
    """One VRAG-RL episode over an index; ``pages`` maps page ids to pages (sizes, images)."""

    searcher: Searcher
    pages: Mapping[str, Page]
    paradigm: Paradigm = field(default_factory=SearchAgent)
    max_turns: int = 5  # released rollout: 4 action turns plus a final answer turn
    crop_mode: CropMode = "paper"
    pad_crops: bool = False  # upstream pads boxes by 28 displayed pixels in validation only
    max_pixels: int = VRAG_MAX_PIXELS
    min_pixels: int = VRAG_MIN_PIXELS
    top_k: int = 5
    stop: tuple[str, ...] = ("</search>", "</bbox>", "</answer>")
    fetch: bool = False  # ALDEN's <fetch>N</fetch>: open the episode's page N directly
    # the convention a <bbox> is written in (``evidra.core.box_formats``); None: pixels of the image
    # last shown, as VRAG-RL's policies (and evidra's trained checkpoints) write it
    box_format: BoxFormat | None = None
    retrieved: list[str] = field(default_factory=list, init=False)
    invalid: int = field(default=0, init=False)
    turns: int = field(default=0, init=False)
    _shown: Displayed | None = field(default=None, init=False, repr=False)
    _last_page: Displayed | None = field(default=None, init=False, repr=False)
    _parsed: tuple[str, Parsed] | None = field(default=None, init=False, repr=False)
    _prefetched: list[Hit] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        if not self.fetch:
            return
        if "</fetch>" not in self.stop:
            self.stop = (*self.stop, "</fetch>")
        if isinstance(self.paradigm, SearchAgent):  # another paradigm must read <fetch> itself
            self.paradigm = with_fetch(self.paradigm)

    def reset(self, sample: Sample) -> list[Message]:
        self.retrieved, self.invalid, self.turns = [], 0, 0
        self._shown = self._last_page = None
        self._parsed = self._prefetched = None
        return self.paradigm.build_messages(sample, ())

    def _parse(self, text: str) -> Parsed:
        if self._parsed is None or self._parsed[0] != text:  # parsed once per turn
            self._parsed = (text, self.paradigm.parse(text))
        return self._parsed[1]

    def pending_search(self, text: str) -> SearchRequest | None:
        """The search ``step(text)`` will run (so the rollout loop can batch it), or None."""
        parsed = self._parse(text)
        action = parsed.action
        if action is None or action.name != "search" or self.turns + 1 >= self.max_turns:
            return None
        if _invalid_reason(parsed) is not None:
            return None
        return SearchRequest(self.searcher, action.argument, self.top_k, frozenset(self.retrieved))

    def prefetch(self, hits: list[Hit]) -> None:
        self._prefetched = list(hits)

    def step(self, text: str) -> StepResult:
        try:
            return self._step(text)
        finally:
            self._prefetched = None  # hits are for this turn's search only

    def _step(self, text: str) -> StepResult:
        self.turns += 1
        parsed = self._parse(text)
        action = parsed.action
        if action is not None and action.name == "answer":
            return self._result((), True, action="answer", answer=parsed.answer)
        if self.turns >= self.max_turns:
            return self._result((), True, action=action.name if action else "none", turn_limit=True)
        reason = _invalid_reason(parsed)
        if reason is None and action is not None and action.name == "search":
            return self._search(action.argument)
        if reason is None and action is not None and action.name == "fetch" and self.fetch:
            return self._fetch(action.argument)
        if reason is None and action is not None and action.name == "bbox":
            if self._shown is None or self._last_page is None:
                reason = "there is no image to crop yet; search first"
            else:
                return self._crop(parsed)
        return self._invalid(reason or "unknown action")

    # actions ------------------------------------------------------------------------------
    def _search(self, query: str) -> StepResult:
        if self._prefetched is not None:  # the rollout loop ran this search in its batch
            hits, self._prefetched = self._prefetched, None
        else:
            hits = self.searcher.search([query], k=self.top_k, exclude=[set(self.retrieved)])[0]
        hit = next((h for h in hits if h.page_id not in self.retrieved), None)
        if hit is None:
            reply = Message.text("user", NO_RESULT_MESSAGE.format(query=query))
            return self._result((reply,), False, action="search", query=query, page_id=None)
        page = self.pages.get(hit.page_id)
        path = page.image_path if page is not None else hit.image_path
        if not path:  # a search service's hit names no local file: only the episode's pages open
            reply = Message.text("user", UNKNOWN_PAGE_MESSAGE.format(page_id=hit.page_id, query=query))
            return self._result((reply,), False, action="search", query=query, page_id=None)
        obs = self._show(hit.page_id, path)
        return self._result((obs,), False, action="search", query=query, page_id=hit.page_id)

    def _fetch(self, argument: str) -> StepResult:
        """ALDEN's fetch: the page numbered ``argument`` (from 1) among the episode's pages."""
        found = page_at(argument, list(self.pages))
        if isinstance(found, FetchError):
            return self._invalid(found.reason, action="fetch")
        page = self.pages[found]
        if not page.image_path:
            return self._invalid(f"page {argument.strip()} has no image to show", action="fetch")
        obs = self._show(found, page.image_path)
        return self._result((obs,), False, action="fetch", page_id=found)

    def _show(self, page_id: str, path: str) -> Message:
        """The page as displayed (VRAG's resize), recorded as retrieved (once) and as the last image."""
        image = _open(path)
        shown = Displayed.page(page_id, path, image.size, self.max_pixels, self.min_pixels)
        if page_id not in self.retrieved:
            self.retrieved.append(page_id)
        self._shown = self._last_page = shown
        return Message("user", (ImagePart(resized(image, shown.size), page_id=page_id),))

    def _crop(self, parsed: Parsed) -> StepResult:
        assert parsed.action is not None and parsed.action.box is not None  # checked by _invalid_reason
        assert self._shown is not None and self._last_page is not None
        box = parsed.action.box
        page = self._last_page if CROP_RULES.get(self.crop_mode).from_last_page else self._shown
        values = box.as_tuple()
        if self.box_format is not None:  # another family's convention: first to the displayed pixels
            mapped = on_shown(self.box_format, values, self._shown)
            if mapped.box is None:
                return self._invalid(
                    f"the box {list(values)} cannot be placed on the last image: {mapped.error}"
                )
            values = mapped.box.as_tuple()
        x1, y1, x2, y2 = crop_displayed(values, self._shown, self._last_page, self.crop_mode, self.pad_crops)
        if x2 <= x1 or y2 <= y1:
            return self._invalid(f"the box {list(box.as_tuple())} covers no pixel of the last image")
        size = process_image_size(x2 - x1, y2 - y1, self.max_pixels, self.min_pixels)
        if (thin := too_thin(box.as_tuple(), size)) is not None:
            return self._invalid(thin)
        image = _open(page.image_path).crop((x1, y1, x2, y2))
        self._shown = Displayed(page.page_id, page.image_path, page.page_size, (x1, y1, x2, y2), size)
        w, h = page.page_size
        ratio = (x2 - x1) * (y2 - y1) / float(w * h)
        obs = Message("user", (ImagePart(resized(image, size), page_id=page.page_id),))
        return self._result(
            (obs,), False, action="bbox", page_id=page.page_id, crop=(x1, y1, x2, y2), area_ratio=ratio
        )

    def _invalid(self, reason: str, action: str = "invalid") -> StepResult:
        self.invalid += 1
        template = INVALID_FETCH_MESSAGE if self.fetch else INVALID_MESSAGE
        reply = Message.text("user", template.format(reason=reason))
        return self._result((reply,), False, action=action, invalid=True, reason=reason)

    def _result(self, obs: tuple[Message, ...], done: bool, **info: Unpack[StepFields]) -> StepResult:
        step = StepInfo(**info, retrieved=tuple(self.retrieved), invalid_count=self.invalid, turn=self.turns)
        return StepResult(obs, done, step, parsed=self._parsed[1] if self._parsed is not None else None)


@dataclass(frozen=True)
class FetchError:
    """Why a ``<fetch>`` names no page (one line, shown to the policy)."""

    reason: str


def page_at(argument: str, order: Sequence[str]) -> str | FetchError:
    """The id of the page numbered ``argument`` (from 1) in ``order``, or why there is none; never
    raises: a non-number, a number of more than ``MAX_PAGE_DIGITS`` digits or one out of range is
    a ``FetchError``.

    >>> page_at(" 2 ", ["a", "b"]), page_at("9" * 400, ["a"]).reason
    ('b', 'page 9999999999... is out of range: this document has pages 1 to 1')
    """
    text = argument.strip()
    count = len(order)
    if count == 0:
        return FetchError("this episode has no pages to fetch; search instead")
    value = parse_digits(text, MAX_PAGE_DIGITS)
    if value is None:
        digits = text.lstrip("+-")
        if digits.isdecimal():  # a number too long to be a page: out of range, never converted
            return FetchError(f"page {digits[:10]}... is out of range: this document has pages 1 to {count}")
        return FetchError(f"<fetch> takes one page number such as 3, got {text[:40]!r}")
    if not 1 <= value <= count:
        return FetchError(f"page {value} is out of range: this document has pages 1 to {count}")
    return order[value - 1]


def _invalid_reason(parsed: Parsed) -> str | None:
    if parsed.action is None:
        return "no <search>, <bbox> or <answer> action was found"
    if parsed.action.name == "bbox" and parsed.action.box is None:
        return "the box must be a JSON list [x1, y1, x2, y2] of non-negative numbers with x1 < x2, y1 < y2"
    if parsed.action.name == "search" and not parsed.action.argument:
        return "the search query is empty"
    if parsed.action.name == "fetch" and not parsed.action.argument:
        return "the page number is empty"
    return None


def _open(path: str) -> PILImage:
    return imagefiles.decode(path, f"page image {path}", error=CorpusError)


ENVIRONMENTS.add("search", SearchEnv)
