"""A self-contained HTML evidence viewer: each page with its boxes, beside question and answer.

The page is rendered from ``evidra/templates/viewer.html.j2`` (``evidra.core.templating``: autoescape
on), so every piece of model or document text is HTML-escaped; this module only computes what
the template draws. Boxes are absolutely positioned overlays in percentages of the page, so the
page image can be scaled freely (a page's image may be rendered at any resolution: boxes are in
the pixels of ``width x height``). Each box carries its label as a small numbered tag on its
top-left corner, matching the step list, and boxes that coincide (a step and the answer citing the
same region) are drawn once with both labels. Every page has a visible caption (its title) and
an "enlarge" link that shows it over the whole window (CSS ``:target``, no script). Page images
are linked relative to the page, or with ``embed_images=True`` inlined as data URIs, so one file
can be moved or mailed on its own. With ``thumbnail_width`` each page is shown as an embedded
thumbnail that opens the full-size page, boxes included, in a CSS lightbox. With ``filters`` the
cards can be narrowed to correct, wrong or unparsed answers (CSS radio buttons, no script).
"""

from __future__ import annotations

import base64
import mimetypes
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from markupsafe import Markup

from evidra.core import imagefiles
from evidra.core.errors import InvalidInputError
from evidra.core.templating import render
from evidra.core.types import Box, CoordSpace


@dataclass(frozen=True)
class ViewerBox:
    box: Box  # page pixels
    label: str
    color: str = "#16a34a"
    line: Literal["solid", "dashed", "dotted"] = "solid"


@dataclass(frozen=True)
class ViewerPage:
    image_path: str
    width: int
    height: int
    title: str = ""
    boxes: tuple[ViewerBox, ...] = ()


@dataclass(frozen=True)
class ViewerStep:
    """A reasoning step listed beside the pages; ``label`` matches its box's label."""

    label: str
    text: str
    color: str = "#2563eb"


@dataclass(frozen=True)
class ViewerRecord:
    question: str
    prediction: str | None
    answers: tuple[str, ...]
    correct: bool | None
    pages: tuple[ViewerPage, ...]
    output: str = ""
    details: dict[str, str] = field(default_factory=dict)
    steps: tuple[ViewerStep, ...] = ()
    rewards: dict[str, float] = field(default_factory=dict)
    heading: str = ""  # which model answered, when records are shown side by side


@dataclass(frozen=True)
class ViewerSection:
    """A heading (and a paragraph) above the cards that follow it; their numbers start again at 1."""

    title: str
    note: str = ""


# one card: a record, or several records answering the same question side by side
ViewerItem = ViewerRecord | tuple[ViewerRecord, ...]


def _image_src(image_path: str, base: Path | None) -> str:
    """A link relative to ``base``, or (``base`` None) the image itself as a data URI."""
    if base is not None:
        return os.path.relpath(image_path, base)
    mime = mimetypes.guess_type(image_path)[0] or "image/png"
    return f"data:{mime};base64," + base64.b64encode(Path(image_path).read_bytes()).decode("ascii")


def thumbnail_uri(image_path: str, width: int) -> str:
    """A ``width``-pixel-wide PNG of the image as a data URI (no upscaling)."""
    import io

    from PIL import Image

    rgb = imagefiles.decode(image_path, f"image {image_path}")
    if rgb.width > width:
        rgb = rgb.resize((width, max(1, round(rgb.height * width / rgb.width))), Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    rgb.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


@dataclass(frozen=True)
class _Images:
    base: Path | None  # link images relative to this folder; None: embed them
    thumbnail_width: int | None  # embed thumbnails that open a lightbox; None: full images inline
    thumbnails: dict[str, str] = field(default_factory=dict)  # image path -> its thumbnail, made once

    def thumbnail(self, image_path: str, width: int) -> str:
        if image_path not in self.thumbnails:
            self.thumbnails[image_path] = thumbnail_uri(image_path, width)
        return self.thumbnails[image_path]


# What the template draws, computed here so the template holds markup only.


@dataclass(frozen=True)
class _Overlay:
    """A box over its page, placed in percentages of the page's width and height."""

    box: ViewerBox
    left: float
    top: float
    width: float
    height: float


@dataclass(frozen=True)
class _PageView:
    page: ViewerPage
    anchor: str  # the id of its lightbox
    src: str  # the full-size image: a relative link or a data URI
    thumb: str | None  # the embedded thumbnail that opens the lightbox; None: the page is shown full
    overlays: tuple[_Overlay, ...]
    legend: tuple[ViewerBox, ...]  # one entry per distinct label, colour and line


@dataclass(frozen=True)
class _Filter:
    """One filter button: the outcome it keeps and how many cards have it."""

    outcome: str  # all | correct | wrong | unparsed | unscored
    count: int


@dataclass(frozen=True)
class _AnswerView:
    record: ViewerRecord
    pages: tuple[_PageView, ...]


@dataclass(frozen=True)
class _CardView:
    anchor: str
    number: int
    answers: tuple[_AnswerView, ...]  # one per model; the first gives question and gold answers
    outcome: str  # the filter it falls under: correct | wrong | unparsed | unscored
    section: ViewerSection | None = None  # the heading shown above this card


OUTCOMES = ("correct", "wrong", "unparsed", "unscored")


def outcome(record: ViewerRecord) -> str:
    """``unparsed`` when no answer was parsed, else ``correct``/``wrong`` (``unscored`` without a score)."""
    if record.prediction is None:
        return "unparsed"
    return "unscored" if record.correct is None else "correct" if record.correct else "wrong"


def _overlay(vb: ViewerBox, page: ViewerPage) -> _Overlay:
    b = vb.box
    if b.space is not CoordSpace.PAGE:
        raise InvalidInputError(
            f"viewer box {vb.label!r} is in {b.space.value} coordinates; convert it to page pixels "
            "(evidra.core.geometry) before drawing it"
        )
    w, h = page.width, page.height
    return _Overlay(vb, 100 * b.x1 / w, 100 * b.y1 / h, 100 * b.width / w, 100 * b.height / h)


def merge_coinciding(boxes: Sequence[ViewerBox], tolerance: float = 0.5) -> tuple[ViewerBox, ...]:
    """One box per region: boxes whose corners are within ``tolerance`` page pixels of an earlier
    box's become that box, their labels joined ("2 · answer"); the first box's colour and line stay.

    >>> a, b = Box(10, 10, 50, 30), Box(10.4, 10, 50, 30.2)
    >>> [v.label for v in merge_coinciding([ViewerBox(a, "2"), ViewerBox(b, "answer")])]
    ['2 · answer']
    """
    merged: list[ViewerBox] = []
    for vb in boxes:
        for i, kept in enumerate(merged):
            near = all(
                abs(x - y) <= tolerance for x, y in zip(kept.box.as_tuple(), vb.box.as_tuple(), strict=True)
            )
            if near and kept.box.space is vb.box.space:
                if vb.label not in kept.label.split(" · "):
                    merged[i] = ViewerBox(kept.box, f"{kept.label} · {vb.label}", kept.color, kept.line)
                break
        else:
            merged.append(vb)
    return tuple(merged)


def _page_view(page: ViewerPage, images: _Images, anchor: str) -> _PageView:
    thumb = None
    if images.thumbnail_width is not None:
        thumb = images.thumbnail(page.image_path, images.thumbnail_width)
    boxes = merge_coinciding(page.boxes)
    legend = {(vb.label, vb.color, vb.line): vb for vb in boxes}
    return _PageView(
        page,
        anchor,
        _image_src(page.image_path, images.base),
        thumb,
        tuple(_overlay(vb, page) for vb in boxes),
        tuple(legend.values()),
    )


def _card_view(
    i: int, number: int, item: ViewerItem, images: _Images, section: ViewerSection | None
) -> _CardView:
    recs = item if isinstance(item, tuple) else (item,)
    anchors = [f"rec-{i}"] if len(recs) == 1 else [f"rec-{i}-{k}" for k in range(len(recs))]
    answers = tuple(
        _AnswerView(r, tuple(_page_view(p, images, f"{a}-p{k}") for k, p in enumerate(r.pages)))
        for r, a in zip(recs, anchors, strict=True)
    )
    return _CardView(f"rec-{i}", number, answers, outcome(recs[0]), section)


def _card_views(items: Sequence[ViewerItem | ViewerSection], images: _Images) -> list[_CardView]:
    """Each record's card; a section goes onto the card after it (a section with no card after
    it shows nothing)."""
    cards: list[_CardView] = []
    section: ViewerSection | None = None
    number = 0
    for item in items:
        if isinstance(item, ViewerSection):
            section, number = item, 0
            continue
        number += 1
        cards.append(_card_view(len(cards), number, item, images, section))
        section = None
    return cards


def write_viewer(
    records: Sequence[ViewerItem | ViewerSection],
    path: str | Path,
    title: str = "evidra report",
    *,
    preamble: str = "",
    embed_images: bool = False,
    thumbnail_width: int | None = None,
    filters: bool = False,
) -> Path:
    """Write the viewer page to ``path``; image links are relative to its folder, or with
    ``embed_images`` the images are inside the file. With ``thumbnail_width`` (pixels) each
    page is an embedded thumbnail that opens the full-size page in a lightbox.

    A record that is a tuple of records is one card: the same question answered by several
    models (each ``heading`` names one), side by side. ``preamble`` is HTML placed before the
    records (a training summary, charts); it is not escaped, so build it only from evidra's own
    templates (``evidra.core.templating.render``). ``filters`` adds buttons that show only the correct,
    wrong or unparsed answers (by the first record of each card), with their counts. A
    ``ViewerSection`` among the records puts a heading above the cards after it.
    """
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    images = _Images(None if embed_images else out.parent.resolve(), thumbnail_width)
    cards = _card_views(records, images)
    counts = [_Filter(o, sum(c.outcome == o for c in cards)) for o in OUTCOMES]
    shown = [_Filter("all", len(cards)), *(f for f in counts if f.count)] if filters else []
    doc = render(
        "viewer.html.j2",
        title=title,
        preamble=Markup(preamble),  # trusted: evidra's own rendered markup
        cards=cards,
        thumbnails=thumbnail_width is not None,
        filters=shown,
    )
    out.write_text(doc, encoding="utf-8")
    return out
