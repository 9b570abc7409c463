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
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import CorpusError
from evidra.core.types import Box, Word

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


DEFAULT_MAX_PIXELS = 50_000_000  # a Letter page at 150 dpi is 2.1 Mpx; A0 at 150 dpi is 27 Mpx
DEFAULT_MAX_PAGES = 10_000


@dataclass(frozen=True)
class RenderedPage:
    """One rendered page: 1-based number, RGB image, words in page pixels.

    ``dpi`` is set when a PDF page was rendered at another resolution than asked for (to fit the
    pixel cap); ``None`` means the file's resolution (or none, for images).
    """

    page_number: int
    image: PILImage
    words: tuple[Word, ...]
    dpi: float | None = None


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


def pdf_title(data: bytes, name: str = "<pdf>") -> str:
    """The PDF's own ``/Title`` (its document information), or "" when it has none."""
    doc = _open(data, name)
    try:
        title = doc.get_metadata_value("Title")  # type: ignore[attr-defined]
    except Exception:  # a damaged information dictionary: no title, the pages may still render
        title = ""
    finally:
        doc.close()  # type: ignore[attr-defined]
    return " ".join(str(title).split())[:300]


def capped_scale(width_pt: float, height_pt: float, scale: float, max_pixels: int) -> float:
    """``scale`` (pixels per point), lowered if needed so the render has at most ``max_pixels``.

    PDFium rounds each side up, so the lowered scale leaves room for one extra pixel per side.

    >>> capped_scale(612, 792, 150 / 72, 50_000_000)  # a Letter page at 150 dpi fits
    2.0833333333333335
    >>> round(capped_scale(14_400, 14_400, 150 / 72, 50_000_000) * 14_400)  # 30000 px -> 7070
    7070
    """
    width, height = max(width_pt, 1e-6), max(height_pt, 1e-6)
    if math.ceil(width * scale) * math.ceil(height * scale) <= max_pixels:
        return scale
    fit = math.sqrt(max_pixels / (width * height))
    while fit > 0 and math.ceil(width * fit) * math.ceil(height * fit) > max_pixels:
        fit *= 0.9999
    return fit


def pixel_amount(pixels: int) -> str:
    """A pixel count for people, exact below a million.

    >>> pixel_amount(60_000), pixel_amount(2_100_000), pixel_amount(31_500_000_000)
    ('60000 pixels', '2.1 Mpx (2100000 pixels)', '31.5 Gpx (31500000000 pixels)')
    """
    if pixels >= 1e9:
        return f"{pixels / 1e9:.1f} Gpx ({pixels} pixels)"
    if pixels >= 1e6:
        return f"{pixels / 1e6:.1f} Mpx ({pixels} pixels)"
    return f"{pixels} pixels"


def over_doc_pixels(name: str, total: int, pages: int, cap: int, at: str = "") -> CorpusError:
    """The one-line refusal of a document whose pages add up to more than ``cap`` pixels."""
    return CorpusError(
        f"{name} is {pixel_amount(total)} over its {pages} pages{at}, over the cap of {pixel_amount(cap)} "
        f"per document; split it{' or lower --dpi' if at else ''}, or raise the cap "
        f"(--max-doc-pixels {total})"
    )


def render_pdf(
    data: bytes,
    dpi: float,
    name: str = "<pdf>",
    *,
    max_pixels: int = DEFAULT_MAX_PIXELS,
    max_pages: int = DEFAULT_MAX_PAGES,
    max_doc_pixels: int | None = None,
    on_open: Callable[[int], None] | None = None,
) -> Iterator[RenderedPage]:
    """Yield the pages of the PDF in ``data`` one at a time, rendered at ``dpi``, with their words.

    A page that would exceed ``max_pixels`` at ``dpi`` is rendered at the highest resolution
    that fits (its ``RenderedPage.dpi`` says which, and a warning is logged). Raises
    ``CorpusError`` (naming ``name``) for a corrupt or encrypted file, one with more than
    ``max_pages`` pages, or one whose pages together would have more than ``max_doc_pixels``
    pixels (checked from the page sizes before any page renders); it may raise after some pages
    were yielded, so callers that need all-or-nothing must stage what they write.
    ``MemoryError`` is let through: the caller knows which memory cap was hit. ``on_open`` is
    called with the page count once the file is open and within its caps.
    """
    if dpi <= 0:
        raise CorpusError(f"dpi must be positive, got {dpi}")
    pdf = _open(data, name)
    try:
        count = len(pdf)  # type: ignore[arg-type]
        if count > max_pages:
            raise CorpusError(
                f"{name} has {count} pages, over the cap of {max_pages} pages per file; "
                f"split it or raise the cap (--max-pages {count})"
            )
        if max_doc_pixels is not None:
            total = document_pixels(pdf, count, dpi, name, max_pixels)
            if total > max_doc_pixels:
                raise over_doc_pixels(name, total, count, max_doc_pixels, f" at {dpi:g} dpi")
        if on_open is not None:
            on_open(count)
        for index in range(count):
            yield _render_page(pdf, index, dpi, name, max_pixels)
    finally:
        pdf.close()  # type: ignore[attr-defined]


def document_pixels(pdf: object, count: int, dpi: float, name: str, max_pixels: int) -> int:
    """How many pixels the ``count`` pages of ``pdf`` have once rendered at ``dpi`` under ``max_pixels``.

    Read from the page dictionaries only (PDFium does not parse a page's content for its size).
    """
    total = 0
    for index in range(count):
        try:
            width_pt, height_pt = pdf.get_page_size(index)  # type: ignore[attr-defined]
        except Exception as exc:  # PDFium failure on one page fails the file
            raise CorpusError(f"{name}: page {index + 1} has no readable size ({exc})") from exc
        scale = capped_scale(width_pt, height_pt, dpi / POINTS_PER_INCH, max_pixels)
        total += math.ceil(max(width_pt, 1e-6) * scale) * math.ceil(max(height_pt, 1e-6) * scale)
    return total


def _render_page(pdf: object, index: int, dpi: float, name: str, max_pixels: int) -> RenderedPage:
    page = pdf[index]  # type: ignore[index]
    try:
        width_pt, height_pt = page.get_size()
        scale = capped_scale(width_pt, height_pt, dpi / POINTS_PER_INCH, max_pixels)
        page_dpi = None
        if scale < dpi / POINTS_PER_INCH:
            page_dpi = scale * POINTS_PER_INCH
            logger.warning(
                "%s: page %d is %.0f x %.0f pt; rendered at %.1f dpi instead of %g to stay under "
                "the cap of %d pixels per page",
                name,
                index + 1,
                width_pt,
                height_pt,
                page_dpi,
                dpi,
                max_pixels,
            )
        left, bottom, right, top = page.get_bbox()
        geo = PageGeometry(left, bottom, right, top, int(page.get_rotation()), scale)
        image = page.render(scale=scale).to_pil().convert("RGB")
        words = page_words(page, geo, image.width, image.height)
    except (CorpusError, MemoryError):
        raise
    except Exception as exc:  # PDFium failure on one page fails the file
        raise CorpusError(f"{name}: page {index + 1} could not be rendered ({exc})") from exc
    finally:
        page.close()
    return RenderedPage(index + 1, image, words, page_dpi)
