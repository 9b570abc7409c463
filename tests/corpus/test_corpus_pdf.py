"""PDF rendering and text-layer extraction: word boxes land where the text was put."""

from __future__ import annotations

import numpy as np
import pytest

from evidra.core.errors import CorpusError
from evidra.core.types import Box
from evidra.corpus.pdf import PageGeometry, PdfChar, group_words, render_pdf, user_to_pixels
from evidra.corpus.pdfwriter import HELVETICA_CAP_HEIGHT, PdfCanvas, text_width, write_pdf

# ----------------------------------------------------------------------------- pure helpers


def _c(text: str, x: float, y: float = 0.0, w: float = 5.0, generated: bool = False) -> PdfChar:
    return PdfChar(text, (x, y, x + w, y + 7.0), generated)


def test_group_words_splits_on_spaces_generated_chars_lines_and_gaps() -> None:
    chars = [
        _c("a", 0),
        _c("b", 5),
        _c(" ", 10),  # real space
        _c("c", 15),
        _c("\r", 20, generated=True),
        _c("\n", 20, generated=True),  # generated break
        _c("d", 0, y=-20),
        _c("e", 5, y=-20),  # next line, no separator in between
        _c("f", 0, y=-40),
        _c("g", 30, y=-40),  # gap of 25 > 0.6 * 7 on the same line
    ]
    words = group_words(chars)
    assert [w for w, _ in words] == ["ab", "c", "de", "f", "g"]
    assert words[0][1] == (0.0, 0.0, 10.0, 7.0)
    assert words[2][1] == (0.0, -20.0, 10.0, -13.0)


def test_group_words_keeps_the_letters_of_one_glyph_together() -> None:
    # A wide "ffi" glyph: its three letters share box and origin; box to box it jumps back 12 > 0.6 * 7.
    ffi = [PdfChar(t, (5.0, 0.0, 17.0, 7.0), origin=(5.0, 0.0)) for t in "ffi"]
    chars = [PdfChar("e", (0.0, 0.0, 5.0, 7.0), origin=(0.0, 0.0)), *ffi, _c("x", 17)]
    assert group_words(chars) == [("effix", (0.0, 0.0, 22.0, 7.0))]
    # Without origins (PDFium gave none) the same boxes read as a jump backwards, as before.
    assert [w for w, _ in group_words([PdfChar(c.text, c.box) for c in chars])] == ["ef", "f", "ix"]


def test_group_words_breaks_when_a_line_changes_without_a_separator() -> None:
    words = group_words([_c("x", 100), _c("y", 0, y=-10)])
    assert [w for w, _ in words] == ["x", "y"]


@pytest.mark.parametrize(
    ("rotation", "expected"),
    [
        # page box (10, 20, 110, 220) -> 100 x 200 points; box (20, 30, 40, 80); scale 2
        (0, (20.0, 280.0, 60.0, 380.0)),  # x: (20-10)*2..(40-10)*2, y: (220-80)*2..(220-30)*2
        (90, (20.0, 20.0, 120.0, 60.0)),  # x: (y-20)*2, y: (x-10)*2
        (180, (140.0, 20.0, 180.0, 120.0)),  # x: (110-x)*2, y: (y-20)*2
        (270, (280.0, 140.0, 380.0, 180.0)),  # x: (220-y)*2, y: (110-x)*2
    ],
)
def test_user_to_pixels_hand_computed(rotation: int, expected: tuple[float, ...]) -> None:
    geo = PageGeometry(10.0, 20.0, 110.0, 220.0, rotation, 2.0)
    assert user_to_pixels((20.0, 30.0, 40.0, 80.0), geo).as_tuple() == pytest.approx(expected)


# ----------------------------------------------------------------------------- rendering


def _two_page_pdf() -> bytes:
    first = PdfCanvas(612, 792)
    first.text(72, 100, "ALPHA BETA", 20)
    first.text(300, 500, "2048", 10)
    second = PdfCanvas(400, 300)
    second.text(50, 80, "HELLO", 30)
    return write_pdf([first, second])


def _expected(x: float, baseline: float, text: str, size: float, scale: float) -> Box:
    """Where a caps/digits word sits: advance width by cap height above the baseline."""
    top = baseline - HELVETICA_CAP_HEIGHT * size / 1000
    return Box(x * scale, top * scale, (x + text_width(text, size)) * scale, baseline * scale)


@pytest.mark.parametrize("dpi", [72, 150])
def test_word_boxes_match_known_positions(dpi: int) -> None:
    scale = dpi / 72
    pages = list(render_pdf(_two_page_pdf(), dpi, "two.pdf"))
    assert [p.page_number for p in pages] == [1, 2]
    # PDFium rounds the bitmap size up (1650.0 -> 1651 at 150 dpi), hence abs=1.
    assert pages[0].image.size == pytest.approx((612 * scale, 792 * scale), abs=1)
    assert pages[1].image.size == pytest.approx((400 * scale, 300 * scale), abs=1)
    expected = {
        (1, "ALPHA"): (_expected(72, 100, "ALPHA", 20, scale), 20),
        (1, "BETA"): (_expected(72 + text_width("ALPHA ", 20), 100, "BETA", 20, scale), 20),
        (1, "2048"): (_expected(300, 500, "2048", 10, scale), 10),
        (2, "HELLO"): (_expected(50, 80, "HELLO", 30, scale), 30),
    }
    found = {(p.page_number, w.text): w.box for p in pages for w in p.words}
    assert set(found) == set(expected)
    for key, (want, size) in expected.items():
        # Tolerance: 0.1 em (glyph side bearings and overshoot of round letters), in pixels.
        tol = 0.1 * size * scale
        assert found[key].as_tuple() == pytest.approx(want.as_tuple(), abs=tol), key


@pytest.mark.parametrize("rotation", [90, 180, 270])
def test_rotated_pages_put_word_boxes_on_the_ink(rotation: int) -> None:
    canvas = PdfCanvas(300, 200, rotation=rotation)
    canvas.text(40, 60, "ROTATED", 24)
    canvas.text(150, 150, "TEXT", 16)
    (page,) = render_pdf(write_pdf([canvas]), 100)
    sides = (300, 200) if rotation == 180 else (200, 300)  # 90 and 270 swap width and height
    assert page.image.size == pytest.approx((sides[0] * 100 / 72, sides[1] * 100 / 72), abs=1)
    ink = np.asarray(page.image.convert("L")) < 128
    inside = np.zeros_like(ink)
    for word in page.words:
        b = word.box
        inside[int(b.y1) : int(np.ceil(b.y2)) + 1, int(b.x1) : int(np.ceil(b.x2)) + 1] = True
    assert [w.text for w in page.words] == ["ROTATED", "TEXT"]
    assert (ink & ~inside).sum() <= 0.01 * ink.sum()  # all ink lies inside the word boxes


def test_ligature_glyphs_come_out_inside_whole_words(ligature_pdf: bytes) -> None:
    import pypdfium2 as pdfium

    words = ["Specification", "of", "the", "floor", "fine"]
    with pdfium.PdfDocument(ligature_pdf) as pdf:  # PDFium's own text of the page
        assert pdf[0].get_textpage().get_text_range().split() == words
    (page,) = render_pdf(ligature_pdf, 72, "ligatures.pdf")
    assert [w.text for w in page.words] == words
    # "Specification" set at x = 20 pt, 24 pt Times-Roman: advance widths (1/1000 em) S 556, p 500,
    # e 444, c 444, i 278, fi 556, c 444, a 444, t 278, i 278, o 500, n 500 -> 5222 -> 125.33 pt.
    box = page.words[0].box
    assert (box.x1, box.x2) == pytest.approx((20.0, 20.0 + 125.33), abs=0.1 * 24)


def test_corrupt_pdf_raises_corpus_error_naming_the_file() -> None:
    with pytest.raises(CorpusError, match=r"broken\.pdf is not a readable PDF"):
        list(render_pdf(b"%PDF-1.4\nthis is not a pdf", 150, "broken.pdf"))


def test_encrypted_pdf_raises_corpus_error_saying_so(encrypted_pdf: bytes) -> None:
    import pypdfium2 as pdfium

    with pdfium.PdfDocument(encrypted_pdf, password="secret") as pdf:  # it is a real encrypted PDF
        assert pdf[0].get_textpage().get_text_range() == "Secret text"
    with pytest.raises(CorpusError, match=r"locked\.pdf is encrypted \(password-protected\)"):
        list(render_pdf(encrypted_pdf, 150, "locked.pdf"))


def test_render_rejects_non_positive_dpi() -> None:
    with pytest.raises(CorpusError, match="dpi must be positive"):
        list(render_pdf(_two_page_pdf(), 0))
