"""The minimal PDF writer: metrics, escaping, determinism, and that PDFium reads what it writes."""

from __future__ import annotations

import pypdfium2 as pdfium
import pytest

from evidra.core.errors import InvalidInputError
from evidra.corpus.pdfwriter import PdfCanvas, text_width, write_pdf


def test_text_width_uses_helvetica_afm_widths() -> None:
    # H = 722, i = 222, space = 278 (1/1000 em): (722 + 222 + 278) * 10 / 1000 = 12.22
    assert text_width("Hi ", 10) == pytest.approx(12.22)
    assert text_width("", 12) == 0.0


def test_non_ascii_text_is_refused_with_the_offending_character() -> None:
    with pytest.raises(InvalidInputError, match="é"):
        text_width("café", 10)
    with pytest.raises(InvalidInputError, match="outside printable ASCII"):
        PdfCanvas(100, 100).text(0, 10, "tab\there", 10)


def test_canvas_validates_size_rotation_and_paint() -> None:
    with pytest.raises(InvalidInputError, match="size must be positive"):
        PdfCanvas(0, 100)
    with pytest.raises(InvalidInputError, match="rotation"):
        PdfCanvas(100, 100, rotation=45)
    with pytest.raises(InvalidInputError, match="fill or a stroke"):
        PdfCanvas(100, 100).rect(0, 0, 10, 10)
    with pytest.raises(InvalidInputError, match="at least one page"):
        write_pdf([])


def _pdf() -> bytes:
    page = PdfCanvas(300, 200)
    page.text(20, 40, r"a (b) c\d", 12)
    page.rect(10, 60, 100, 90, fill=(0.2, 0.4, 0.8), stroke=(0, 0, 0))
    page.line(10, 120, 200, 120, line_width=2)
    return write_pdf([page, PdfCanvas(200, 300, rotation=90)])


def test_written_pdf_is_deterministic_and_readable() -> None:
    data = _pdf()
    assert data == _pdf()
    with pdfium.PdfDocument(data) as pdf:
        assert len(pdf) == 2
        assert pdf[0].get_size() == (300.0, 200.0)
        assert pdf[1].get_rotation() == 90
        assert pdf[0].get_textpage().get_text_range() == r"a (b) c\d"  # parens/backslash escaped


def test_drawing_puts_ink_where_asked() -> None:
    with pdfium.PdfDocument(_pdf()) as pdf:
        image = pdf[0].render(scale=1).to_pil().convert("RGB")
    assert image.getpixel((50, 75)) == pytest.approx((51, 102, 204), abs=2)  # fill (0.2, 0.4, 0.8)
    assert image.getpixel((150, 75)) == (255, 255, 255)  # right of the rectangle
    assert max(image.getpixel((150, 120))) < 128  # on the 2-pt line at y = 120
