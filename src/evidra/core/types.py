"""Records shared by every part of evidra.

All are frozen dataclasses validated on construction: a bad value fails here, with a message
naming the field, instead of deep inside a training step. Collections are stored as tuples
(or read-only mappings) so a record can be shared between threads and cached safely.

Coordinates: a ``Box`` always carries its ``CoordSpace``. Gold boxes are stored in page
pixels; conversion to what a model sees lives only in ``evidra.core.geometry``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal, get_args

from evidra.core.errors import InvalidInputError
from evidra.core.jsonvalue import JSON, json_kind, need_object

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage


class CoordSpace(str, Enum):
    """The frame a box's numbers are expressed in."""

    PAGE = "page"  # absolute pixels of the stored page image (gold boxes live here)
    MODEL = "model"  # absolute pixels of the smart-resized model input (Qwen2.5-VL's bbox_2d)
    NORM1000 = "norm1000"  # 0..1000 relative to the image (Qwen2-VL, Qwen3-VL)


def _freeze_mapping(obj: object, name: str, value: Mapping[str, object] | None) -> None:
    """Store ``value`` on a frozen dataclass as a read-only copy."""
    object.__setattr__(obj, name, MappingProxyType(dict(value or {})))


def _check_finite(owner: str, **values: float) -> None:
    for key, value in values.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise InvalidInputError(f"{owner}.{key} must be a finite number, got {value!r}")


@dataclass(frozen=True)
class Box:
    """An axis-aligned box ``(x1, y1, x2, y2)`` with x2 >= x1 and y2 >= y1 in ``space``."""

    x1: float
    y1: float
    x2: float
    y2: float
    space: CoordSpace = CoordSpace.PAGE

    def __post_init__(self) -> None:
        _check_finite("Box", x1=self.x1, y1=self.y1, x2=self.x2, y2=self.y2)
        if self.x2 < self.x1 or self.y2 < self.y1:
            raise InvalidInputError(
                f"Box({self.x1}, {self.y1}, {self.x2}, {self.y2}) has x2 < x1 or y2 < y1; "
                "use Box.from_points() to build a box from two corners in any order"
            )
        if not isinstance(self.space, CoordSpace):
            object.__setattr__(self, "space", CoordSpace(self.space))

    @classmethod
    def from_points(
        cls, x1: float, y1: float, x2: float, y2: float, space: CoordSpace = CoordSpace.PAGE
    ) -> Box:
        """Build a box from two opposite corners given in any order."""
        return cls(min(x1, x2), min(y1, y2), max(x1, x2), max(y1, y2), space)

    @classmethod
    def from_xywh(cls, x: float, y: float, w: float, h: float, space: CoordSpace = CoordSpace.PAGE) -> Box:
        """Build a box from top-left corner plus size (SlideVQA's format)."""
        return cls(x, y, x + w, y + h, space)

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.x1, self.y1, self.x2, self.y2)

    @property
    def width(self) -> float:
        return self.x2 - self.x1

    @property
    def height(self) -> float:
        return self.y2 - self.y1


@dataclass(frozen=True)
class Word:
    """One word of a page's text layer, with its box in page pixels."""

    text: str
    box: Box

    def __post_init__(self) -> None:
        if self.box.space is not CoordSpace.PAGE:
            raise InvalidInputError(f"Word {self.text!r} box must be in page pixels, got {self.box.space}")


def content_hash(data: bytes, length: int = 16) -> str:
    """Stable short hash of raw file bytes (sha256, hex)."""
    return hashlib.sha256(data).hexdigest()[:length]


def make_page_id(file_hash: str, page_number: int) -> str:
    """Page id from the source file's content hash and the 1-based page number.

    The id depends on content only, never on paths or render settings, so moving a corpus or
    re-rendering it at another DPI keeps every id.
    """
    if page_number < 1:
        raise InvalidInputError(f"page_number is 1-based, got {page_number}")
    return f"{file_hash}-p{page_number:04d}"


@dataclass(frozen=True)
class Page:
    """One document page as an image on disk, plus what we know about where it came from."""

    id: str
    image_path: str
    width: int
    height: int
    source: str = ""  # source file, relative to the ingest root when ingested
    page_number: int = 1  # 1-based page number inside ``source``
    words: tuple[Word, ...] = ()  # text layer in page pixels; empty for image-only pages
    dpi: float | None = None  # render resolution for PDF pages, None for images

    def __post_init__(self) -> None:
        if not self.id:
            raise InvalidInputError("Page.id must be non-empty; use make_page_id(file_hash, page_number)")
        if self.width <= 0 or self.height <= 0:
            raise InvalidInputError(f"Page {self.id!r} has invalid size {self.width}x{self.height}")
        if self.page_number < 1:
            raise InvalidInputError(f"Page {self.id!r}: page_number is 1-based, got {self.page_number}")
        object.__setattr__(self, "words", tuple(self.words))

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in page pixels, the PIL convention."""
        return (self.width, self.height)

    @property
    def text(self) -> str:
        return " ".join(w.text for w in self.words)

    @property
    def file_name(self) -> str:
        """The source file's name without its folders ("" when the page has no source)."""
        return self.source.replace("\\", "/").rsplit("/", 1)[-1]

    @property
    def citation(self) -> str:
        """How a person cites the page: ``"report.pdf p. 3"`` (the page id when there is no source).

        >>> Page("ab12-p0003", "x.png", 10, 10, source="2024/report.pdf", page_number=3).citation
        'report.pdf p. 3'
        """
        return f"{self.file_name} p. {self.page_number}" if self.source else self.id

    def open_image(self) -> PILImage:
        """Load the page image as RGB; a missing or damaged file, or one over the pixel cap
        (``imagefiles.MAX_PIXELS``, checked before decoding), is a ``CorpusError`` (an ``OSError``)
        naming the page and the file."""
        from evidra.core import imagefiles
        from evidra.core.errors import CorpusError

        try:
            return imagefiles.decode(
                self.image_path, f"page {self.id!r}: image {self.image_path}", error=CorpusError
            )
        except CorpusError as exc:
            raise CorpusError(f"{exc}; ingest its document again (or rebuild the dataset's images)") from None


@dataclass(frozen=True)
class EvidenceBox:
    """A gold box on a given page (page id as in ``Page.id``), in page pixels."""

    page_id: str
    box: Box

    def __post_init__(self) -> None:
        if self.box.space is not CoordSpace.PAGE:
            raise InvalidInputError(
                f"gold evidence boxes are stored in page pixels, got {self.box.space} for page "
                f"{self.page_id!r}; convert with evidra.core.geometry.convert_box first"
            )


AnswerType = Literal["str", "int", "float", "list", "none", "bool"]
ANSWER_TYPES: tuple[AnswerType, ...] = get_args(AnswerType)


@dataclass(frozen=True)
class Sample:
    """One question with everything needed to prompt, score and analyse it.

    ``pages`` are the candidate pages shown to the model (VISA's candidates, a document's
    pages); ``corpus`` names a page store to retrieve from instead (VRAG-RL). ``gold_pages``
    holds page ids; empty when the question is unanswerable from the given pages.
    ``evidence_box`` is the region that carries the evidence (a sentence, a table row, the part of
    a figure to zoom into), wider than the gold answer boxes; ``qrels`` the graded relevance of
    corpus pages (page id -> grade) for ranking metrics. ``answer_type`` is the gold answer's
    type (MMLongBench's ``answer_format``, lower-cased).
    """

    id: str
    question: str
    answers: tuple[str, ...] = ()
    pages: tuple[Page, ...] = ()
    corpus: str | None = None
    gold_pages: tuple[str, ...] = ()
    gold_boxes: tuple[EvidenceBox, ...] = ()
    gold_evidence: Mapping[str, str] = field(default_factory=dict)  # page id -> evidence text
    answerable: bool = True  # False for "No answer" items (VISA pos_idx == -1, MMLongBench None)
    sufficient: bool | None = None  # EVisRAG's sufficiency label; None when unknown
    answer_type: AnswerType | None = None
    dataset: str = ""
    extras: Mapping[str, object] = field(default_factory=dict)
    evidence_box: EvidenceBox | None = None
    qrels: Mapping[str, float] = field(default_factory=dict)  # page id -> graded relevance

    def __post_init__(self) -> None:
        if not self.id:
            raise InvalidInputError("Sample.id must be non-empty")
        if not isinstance(self.question, str) or not self.question.strip():
            raise InvalidInputError(f"Sample {self.id!r} has an empty question")
        if isinstance(self.answers, str):
            raise InvalidInputError(f"Sample {self.id!r}: answers must be a sequence of strings, not a str")
        for name in ("answers", "pages", "gold_pages", "gold_boxes"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if self.evidence_box is not None and not isinstance(self.evidence_box, EvidenceBox):
            raise InvalidInputError(f"Sample {self.id!r}: evidence_box must be an EvidenceBox (page id, box)")
        if self.pages:
            known = {p.id for p in self.pages}
            missing = [g for g in self.gold_pages if g not in known]
            missing += [b.page_id for b in self.gold_boxes if b.page_id not in known]
            evidence = self.evidence_box
            missing += [evidence.page_id] if evidence is not None and evidence.page_id not in known else []
            if missing:
                raise InvalidInputError(
                    f"Sample {self.id!r}: gold page ids {sorted(set(missing))} are not among its pages"
                )
        _freeze_mapping(self, "gold_evidence", self.gold_evidence)
        _freeze_mapping(self, "extras", self.extras)
        for page_id, grade in dict(self.qrels or {}).items():
            _check_finite(f"Sample {self.id!r} qrels[{page_id!r}]", grade=grade)
        _freeze_mapping(self, "qrels", self.qrels)

    def page_index(self, page_id: str) -> int:
        """0-based position of ``page_id`` among ``pages``."""
        for i, page in enumerate(self.pages):
            if page.id == page_id:
                return i
        raise InvalidInputError(f"page {page_id!r} is not a page of sample {self.id!r}")


Role = Literal["system", "user", "assistant"]
ROLES: tuple[Role, ...] = get_args(Role)


@dataclass(frozen=True)
class TextPart:
    text: str
    type: Literal["text"] = "text"


@dataclass(frozen=True)
class ImagePart:
    """An image in a message: a path on disk or an in-memory PIL image (a crop, say)."""

    image: str | Path | PILImage
    page_id: str | None = None
    type: Literal["image"] = "image"


Part = TextPart | ImagePart


@dataclass(frozen=True)
class Message:
    """One chat turn: a role and an ordered list of text and image parts."""

    role: Role
    content: tuple[Part, ...]

    def __post_init__(self) -> None:
        if self.role not in ("system", "user", "assistant"):
            raise InvalidInputError(f"Message.role must be system, user or assistant, got {self.role!r}")
        if isinstance(self.content, str):
            object.__setattr__(self, "content", (TextPart(self.content),))
        object.__setattr__(self, "content", tuple(self.content))
        for part in self.content:
            if not isinstance(part, (TextPart, ImagePart)):
                raise InvalidInputError(
                    f"Message part must be TextPart or ImagePart, got {type(part).__name__}"
                )

    @classmethod
    def text(cls, role: Role, text: str) -> Message:
        return cls(role, (TextPart(text),))

    @property
    def images(self) -> list[ImagePart]:
        return [p for p in self.content if isinstance(p, ImagePart)]

    @property
    def plain_text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


@dataclass(frozen=True)
class Step:
    """One reasoning step of a parsed output, optionally tied to a page and a box on it.

    ``page_index`` is 0-based among the images shown to the model; ``box`` is in whatever
    space the paradigm's model writes (see ``Box.space``).
    """

    text: str
    page_index: int | None = None
    box: Box | None = None


@dataclass(frozen=True)
class Action:
    """A tool call of an agent paradigm: ``search``, ``crop``/``bbox``, ``answer``..."""

    name: str
    argument: str
    box: Box | None = None


@dataclass(frozen=True)
class Parsed:
    """What a paradigm's parser extracts from model text. Never raised: errors are data."""

    text: str
    answer: str | None = None
    steps: tuple[Step, ...] = ()
    action: Action | None = None
    answer_box: Box | None = None
    answer_page: int | None = None
    fields: Mapping[str, str] = field(default_factory=dict)  # tag name -> content (observe, think...)
    errors: tuple[str, ...] = ()
    # page ids the episode's searches inserted, first insertion first: set from the environment's
    # steps (not the text) for rewards that judge retrieval (VRAG-RL's NDCG)
    retrieved: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "steps", tuple(self.steps))
        object.__setattr__(self, "retrieved", tuple(self.retrieved))
        object.__setattr__(self, "errors", tuple(self.errors))
        _freeze_mapping(self, "fields", self.fields)

    @property
    def ok(self) -> bool:
        return not self.errors


@dataclass(frozen=True)
class Span:
    """Half-open token range ``[start, end)`` inside a trajectory's token ids."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if not 0 <= self.start <= self.end:
            raise InvalidInputError(f"Span needs 0 <= start <= end, got [{self.start}, {self.end})")

    def __len__(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class Trajectory:
    """One complete episode as token ids, ready for scoring and for the policy loss.

    ``token_ids`` holds everything after the prompt (policy text and inserted observations),
    exactly as sampled, never re-tokenised. ``policy_mask[t]`` is 1 on tokens the policy sampled
    and 0 on observation tokens; ``logprobs`` are the sampling log-probs (0 where mask is 0).
    """

    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]
    policy_mask: tuple[int, ...]
    logprobs: tuple[float, ...]
    turns: tuple[Span, ...]  # each policy turn's span inside token_ids
    texts: tuple[str, ...]  # each policy turn's decoded text
    scopes: Mapping[str, tuple[Span, ...]] = field(default_factory=dict)
    truncated: bool = False
    finished: bool = True

    def __post_init__(self) -> None:
        for name in ("prompt_ids", "token_ids", "policy_mask", "logprobs", "turns", "texts"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        n = len(self.token_ids)
        if len(self.policy_mask) != n or len(self.logprobs) != n:
            raise InvalidInputError(
                f"Trajectory lengths differ: {n} tokens, {len(self.policy_mask)} mask, "
                f"{len(self.logprobs)} logprobs"
            )
        if len(self.texts) != len(self.turns):
            raise InvalidInputError(f"Trajectory has {len(self.turns)} turns but {len(self.texts)} texts")
        for span in self.turns:
            if span.end > n:
                raise InvalidInputError(f"turn span [{span.start}, {span.end}) exceeds {n} tokens")
        _freeze_mapping(self, "scopes", {k: tuple(v) for k, v in dict(self.scopes).items()})

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def num_policy_tokens(self) -> int:
        return sum(self.policy_mask)

    @property
    def text(self) -> str:
        """All policy turns' text, in order (what single-turn rewards look at)."""
        return "".join(self.texts)


def _part_json(part: Part) -> dict[str, str]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image", "image": str(part.image)}


def messages_to_json(messages: Sequence[Message]) -> list[dict[str, object]]:
    """Messages as JSON, images by path (not inlined).

    >>> messages_to_json([Message.text("user", "hi")])
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}]
    """
    return [{"role": m.role, "content": [_part_json(p) for p in m.content]} for m in messages]


def _part(item: Mapping[str, object]) -> Part:
    if item["type"] == "text":
        return TextPart(str(item["text"]))
    if item["type"] == "image":
        return ImagePart(str(item["image"]))
    raise ValueError(f"unknown part type {item['type']!r}")


def _role(value: JSON) -> Role:
    for role in ROLES:
        if value == role:
            return role
    raise InvalidInputError(f"Message.role must be system, user or assistant, got {value!r}")


def _json_list(value: JSON, what: str) -> list[JSON]:
    if not isinstance(value, list):
        raise TypeError(f"{what} is {json_kind(value)}, not a list")
    return value


def messages_from_json(rows: JSON) -> list[Message]:
    """The inverse of ``messages_to_json``; a ``TypeError``, ``KeyError`` or ``ValueError`` for
    anything else.

    >>> messages_from_json([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])[0].content
    (TextPart(text='hi', type='text'),)
    """
    out = []
    for row in _json_list(rows, "the messages"):
        message = need_object(row, "a message")
        parts = _json_list(message["content"], "a message's content")
        out.append(Message(_role(message["role"]), tuple(_part(need_object(p, "a part")) for p in parts)))
    return out
