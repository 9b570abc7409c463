"""Render PDF pages with PDFium and keep their text layer as words boxed in page pixels.

Why a text layer: BM25 retrieval, evidence text for rewards, and verification of synthetic
gold boxes all need the words of a page together with where they are on the rendered image.

PDF user space has its origin at the bottom-left and is measured in points (1/72 inch); the
rendered image has its origin at the top-left and is measured in pixels. With the page's
visible box ``(left, bottom, right, top)`` (CropBox clipped to MediaBox) and
``scale = dpi / 72``, an unrotated page maps as::

    x_px = (x - left) * scale        y_px = (top - y) * scale

Pages with ``/Rotate`` 90, 180 or 270 are handled by ``user_to_pixels`` too (PDFium renders
them rotated clockwise). PDFium does no layout analysis, so words are built here from its
characters: a word ends at whitespace, at a character PDFium generated (an inferred space or
line break), or where the next glyph jumps backwards, to another line, or far ahead.

One glyph can carry several characters: PDFium spells a ligature glyph ("fi", "ffl", U+FB01)
as its letters, each with the glyph's box and origin. Characters sharing an origin therefore
always continue the word; judged by their boxes alone, "fi" looks like a jump backwards and
"specification" would come out as "specif" + "ication".
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.errors import CorpusError
from evidra.types import Box, Word

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

logger = logging.getLogger(__name__)

POINTS_PER_INCH = 72.0
UserBox = tuple[float, float, float, float]  # left, bottom, right, top in PDF user space


@dataclass(frozen=True)
class PdfChar:
    """One character of PDFium's text page: its text, tight box in user space, and origin."""

    text: str
    box: UserBox
    generated: bool = False  # PDFium inserted it (space between runs, line break)
    origin: tuple[float, float] | None = None  # the glyph's origin; shared by a ligature's letters


@dataclass(frozen=True)
class PageGeometry:
    """What is needed to map user-space points to rendered pixels for one page."""

    left: float
    bottom: float
    right: float
    top: float
    rotation: int  # clockwise degrees: 0, 90, 180 or 270
    scale: float  # pixels per point, dpi / 72


@dataclass(frozen=True)
class RenderedPage:
    """One rendered page: 1-based number, RGB image, words in page pixels."""

    page_number: int
    image: PILImage
    words: tuple[Word, ...]


def user_to_pixels(box: UserBox, geo: PageGeometry) -> Box:
    """Map a user-space box to page pixels of the rendered (rotated) image."""
    left, bottom, right, top = box
    s = geo.scale
    if geo.rotation == 90:  # the page's left edge ends up at the top
        corners = [((y - geo.bottom) * s, (x - geo.left) * s) for x in (left, right) for y in (bottom, top)]
    elif geo.rotation == 180:
        corners = [((geo.right - x) * s, (y - geo.bottom) * s) for x in (left, right) for y in (bottom, top)]
    elif geo.rotation == 270:  # the page's right edge ends up at the top
        corners = [((geo.top - y) * s, (geo.right - x) * s) for x in (left, right) for y in (bottom, top)]
    else:
        corners = [((x - geo.left) * s, (geo.top - y) * s) for x in (left, right) for y in (bottom, top)]
    xs = [c[0] for c in corners]
    ys = [c[1] for c in corners]
    return Box(min(xs), min(ys), max(xs), max(ys))


def _union(a: UserBox, b: UserBox) -> UserBox:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _breaks_word(prev: UserBox, cur: UserBox) -> bool:
    """True when ``cur`` cannot continue the word ending with ``prev`` (another line or a gap)."""
    height = max(prev[3] - prev[1], cur[3] - cur[1], 1e-6)
    same_line = min(prev[3], cur[3]) - max(prev[1], cur[1]) > -0.25 * height
    gap = cur[0] - prev[2]
    return not same_line or gap > 0.6 * height or gap < -0.6 * height


def group_words(chars: Sequence[PdfChar]) -> list[tuple[str, UserBox]]:
    """Group characters into ``(text, user-space box)`` words, in reading order of the stream.

    >>> c = lambda t, x: PdfChar(t, (x, 0.0, x + 5.0, 7.0), origin=(x, 0.0))
    >>> group_words([c("a", 0.0), c("b", 5.0), c(" ", 10.0), c("c", 15.0)])
    [('ab', (0.0, 0.0, 10.0, 7.0)), ('c', (15.0, 0.0, 20.0, 7.0))]

    The letters of a ligature glyph share its box and origin, and stay one word:

    >>> fi = PdfChar("f", (5.0, 0.0, 14.0, 7.0), origin=(5.0, 0.0))
    >>> [w for w, _ in group_words([c("a", 0.0), fi, PdfChar("i", fi.box, origin=fi.origin), c("x", 14.0)])]
    ['afix']
    """
    words: list[tuple[str, UserBox]] = []
    text: list[str] = []
    box: UserBox | None = None
    last: PdfChar | None = None
    for ch in chars:
        if ch.generated or not ch.text or ch.text.isspace() or not ch.text.isprintable():
            if box is not None:
                words.append(("".join(text), box))
            text, box, last = [], None, None
            continue
        same_glyph = last is not None and ch.origin is not None and ch.origin == last.origin
        if box is not None and last is not None and not same_glyph and _breaks_word(last.box, ch.box):
            words.append(("".join(text), box))
            text, box = [], None
        text.append(ch.text)
        box = ch.box if box is None else _union(box, ch.box)
        last = ch
    if box is not None:
        words.append(("".join(text), box))
    return words


def _read_chars(textpage: object) -> list[PdfChar]:
    import ctypes

    import pypdfium2.raw as pdfium_c

    chars = []
    x, y = ctypes.c_double(), ctypes.c_double()
    count: int = textpage.count_chars()  # type: ignore[attr-defined]
    for i in range(count):
        code = pdfium_c.FPDFText_GetUnicode(textpage, i)
        text = chr(code) if 0 < code < 0x110000 else ""
        generated = bool(pdfium_c.FPDFText_IsGenerated(textpage, i) == 1)
        try:
            box = textpage.get_charbox(i)  # type: ignore[attr-defined]
        except Exception:  # PDFium has no box for this char: treat it as a break
            chars.append(PdfChar("", (0.0, 0.0, 0.0, 0.0), True))
            continue
        has_origin = pdfium_c.FPDFText_GetCharOrigin(textpage, i, x, y)
        origin = (x.value, y.value) if has_origin else None
        chars.append(PdfChar(text, (box[0], box[1], box[2], box[3]), generated, origin))
    return chars


def page_words(page: object, geo: PageGeometry, width: int, height: int) -> tuple[Word, ...]:
    """The words of a pypdfium2 page, boxed in pixels of its ``width x height`` render."""
    textpage = page.get_textpage()  # type: ignore[attr-defined]
    try:
        grouped = group_words(_read_chars(textpage))
    finally:
        textpage.close()
    words = []
    for text, user_box in grouped:
        b = user_to_pixels(user_box, geo)
        clipped = Box(
            min(max(b.x1, 0.0), width),
            min(max(b.y1, 0.0), height),
            min(max(b.x2, 0.0), width),
            min(max(b.y2, 0.0), height),
        )
        words.append(Word(text, clipped))
    return tuple(words)


def _open(data: bytes, name: str) -> object:
    import pypdfium2 as pdfium
    import pypdfium2.raw as pdfium_c

    try:
        return pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
            raise CorpusError(
                f"{name} is encrypted (password-protected); decrypt it "
                "(e.g. `qpdf --decrypt`) and ingest again"
            ) from exc
        raise CorpusError(f"{name} is not a readable PDF ({exc})") from exc


def render_pdf(data: bytes, dpi: float, name: str = "<pdf>") -> Iterator[RenderedPage]:
    """Yield every page of the PDF in ``data`` rendered at ``dpi``, with its words.

    Raises ``CorpusError`` (naming ``name``) for a corrupt or encrypted file; it may do so
    after some pages were yielded, so callers that need all-or-nothing must buffer.
    """
    if dpi <= 0:
        raise CorpusError(f"dpi must be positive, got {dpi}")
    pdf = _open(data, name)
    scale = dpi / POINTS_PER_INCH
    try:
        for index in range(len(pdf)):  # type: ignore[arg-type]
            page = pdf[index]  # type: ignore[index]
            try:
                rotation = int(page.get_rotation())
                left, bottom, right, top = page.get_bbox()
                geo = PageGeometry(left, bottom, right, top, rotation, scale)
                image = page.render(scale=scale).to_pil().convert("RGB")
                words = page_words(page, geo, image.width, image.height)
            except CorpusError:
                raise
            except Exception as exc:  # PDFium failure on one page fails the file
                raise CorpusError(f"{name}: page {index + 1} could not be rendered ({exc})") from exc
            finally:
                page.close()
            yield RenderedPage(index + 1, image, words)
    finally:
        pdf.close()  # type: ignore[attr-defined]
