"""Write small PDFs with a real text layer, using nothing but the standard library.

Synthetic documents (``evidra.data.synth.documents``) and the corpus tests need PDFs whose
text sits at positions known in advance, so that gold boxes can be computed from the layout
and then checked against what PDFium extracts. Text is set in the standard Type1 font
Helvetica, which every PDF reader provides without embedding; its advance widths (Adobe's
Helvetica AFM, WinAnsiEncoding, ASCII range) are tabulated below so callers can lay out text.

Coordinates given to ``PdfCanvas`` are in points with the origin at the top-left corner and y
growing downwards (the image convention); the writer flips them into PDF user space.

>>> canvas = PdfCanvas(200, 100)
>>> canvas.text(10, 50, "Hello", size=12)
>>> pdf = write_pdf([canvas])
>>> pdf[:8]
b'%PDF-1.4'
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from evidra.core.errors import InvalidInputError

# Advance widths (1/1000 em) of Helvetica for character codes 32..126, from Adobe's AFM file.
_HELVETICA_WIDTHS: tuple[int, ...] = (
    278,
    278,
    355,
    556,
    556,
    889,
    667,
    191,
    333,
    333,
    389,
    584,
    278,
    333,
    278,
    278,  # space../
    556,
    556,
    556,
    556,
    556,
    556,
    556,
    556,
    556,
    556,
    278,
    278,
    584,
    584,
    584,
    556,  # 0..?
    1015,
    667,
    667,
    722,
    722,
    667,
    611,
    778,
    722,
    278,
    500,
    667,
    556,
    833,
    722,
    778,  # @..O
    667,
    778,
    722,
    667,
    611,
    722,
    667,
    944,
    667,
    667,
    611,
    278,
    278,
    278,
    469,
    556,  # P.._
    333,
    556,
    556,
    500,
    556,
    556,
    278,
    556,
    556,
    222,
    222,
    500,
    222,
    833,
    556,
    556,  # `..o
    556,
    556,
    333,
    500,
    278,
    556,
    500,
    722,
    500,
    500,
    500,
    334,
    260,
    334,
    584,  # p..~
)
HELVETICA_ASCENT = 718  # AFM Ascender, 1/1000 em above the baseline
HELVETICA_DESCENT = 207  # AFM Descender (as a positive depth below the baseline)
HELVETICA_CAP_HEIGHT = 718

Color = tuple[float, float, float]
BLACK: Color = (0.0, 0.0, 0.0)


def _check_text(text: str) -> None:
    bad = sorted({c for c in text if not 32 <= ord(c) <= 126})
    if bad:
        raise InvalidInputError(
            f"PdfCanvas text {text!r} has characters {bad!r} outside printable ASCII; "
            "the built-in Helvetica writer supports only codes 32..126"
        )


def text_width(text: str, size: float) -> float:
    """Advance width of ``text`` in points when set in Helvetica at ``size`` points."""
    _check_text(text)
    return sum(_HELVETICA_WIDTHS[ord(c) - 32] for c in text) * size / 1000.0


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _num(value: float) -> str:
    """Compact, deterministic number formatting for content streams."""
    out = f"{value:.3f}".rstrip("0").rstrip(".")
    return "0" if out in ("-0", "") else out


def _color(rgb: Color, op: str) -> str:
    return " ".join(_num(c) for c in rgb) + f" {op}"


@dataclass
class PdfCanvas:
    """One page being drawn: a list of content-stream operators, top-left coordinates."""

    width: float
    height: float
    rotation: int = 0  # /Rotate of the page, clockwise degrees (0, 90, 180, 270)
    _ops: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.width <= 0 or self.height <= 0:
            raise InvalidInputError(f"PdfCanvas size must be positive, got {self.width}x{self.height}")
        if self.rotation not in (0, 90, 180, 270):
            raise InvalidInputError(f"PdfCanvas.rotation must be 0, 90, 180 or 270, got {self.rotation}")

    def text(self, x: float, baseline: float, text: str, size: float, color: Color = BLACK) -> None:
        """Draw ``text`` with its left end at ``x`` and its baseline ``baseline`` points from the top."""
        _check_text(text)
        y = self.height - baseline
        self._ops.append(
            f"BT {_color(color, 'rg')} /F1 {_num(size)} Tf {_num(x)} {_num(y)} Td ({_escape(text)}) Tj ET"
        )

    def rect(
        self,
        x0: float,
        y0: float,
        x1: float,
        y1: float,
        *,
        fill: Color | None = None,
        stroke: Color | None = None,
        line_width: float = 1.0,
    ) -> None:
        """Draw the rectangle with corners ``(x0, y0)`` and ``(x1, y1)`` (top-left coordinates)."""
        if fill is None and stroke is None:
            raise InvalidInputError("PdfCanvas.rect needs a fill or a stroke color")
        left, right = min(x0, x1), max(x0, x1)
        bottom = self.height - max(y0, y1)
        path = f"{_num(left)} {_num(bottom)} {_num(right - left)} {_num(abs(y1 - y0))} re"
        parts = ["q"]
        if fill is not None:
            parts.append(_color(fill, "rg"))
        if stroke is not None:
            parts += [_color(stroke, "RG"), f"{_num(line_width)} w"]
        op = "B" if fill is not None and stroke is not None else ("f" if fill is not None else "S")
        parts += [path, op, "Q"]
        self._ops.append(" ".join(parts))

    def line(
        self, x0: float, y0: float, x1: float, y1: float, *, color: Color = BLACK, line_width: float = 1.0
    ) -> None:
        """Stroke a straight segment between two points (top-left coordinates)."""
        self._ops.append(
            f"q {_color(color, 'RG')} {_num(line_width)} w {_num(x0)} {_num(self.height - y0)} m "
            f"{_num(x1)} {_num(self.height - y1)} l S Q"
        )

    def content(self) -> bytes:
        return ("\n".join(self._ops) + "\n").encode("ascii")


def _stream(body: bytes, extra: str = "") -> bytes:
    data = zlib.compress(body, 6)
    head = f"<< /Length {len(data)} /Filter /FlateDecode{extra} >>\nstream\n".encode("ascii")
    return head + data + b"\nendstream"


def write_pdf(pages: Sequence[PdfCanvas]) -> bytes:
    """Serialise ``pages`` into one PDF file (deterministic bytes for identical input).

    Object layout: 1 catalog, 2 page tree, 3 font, then a page object and its content
    stream per page. No dates or ids are written, so equal content gives equal bytes and
    therefore equal page ids once ingested.
    """
    if not pages:
        raise InvalidInputError("write_pdf needs at least one page")
    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects: list[bytes] = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode("ascii"),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
    ]
    for i, page in enumerate(pages):
        objects.append(
            (
                f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 {_num(page.width)} {_num(page.height)}] "
                f"/Rotate {page.rotation} /Resources << /Font << /F1 3 0 R >> >> /Contents {5 + 2 * i} 0 R >>"
            ).encode("ascii")
        )
        objects.append(_stream(page.content()))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode("ascii") + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode("ascii")
    for offset in offsets:
        out += f"{offset:010d} 00000 n \n".encode("ascii")
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode("ascii")
    return bytes(out)
