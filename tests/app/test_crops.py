"""A crop holds whole lines: a box grown along the lines it touches, stopping at a column's gutter."""

from __future__ import annotations

import io
from pathlib import Path

from PIL import Image

from evidra.app.crops import MAX_CROP_SIDE, crop_frame, crop_png, line_frame
from evidra.core.types import Box, Word


def _line(y: float, *spans: tuple[float, float]) -> list[Word]:
    """Words 10 px high at ``y``, one per (x1, x2) span."""
    return [Word(f"w{x1:g}", Box(x1, y, x2, y + 10)) for x1, x2 in spans]


# two columns: the left one from x=10 to x=190 (words 8 px apart), the right one from x=230
LEFT = [(10, 50), (58, 100), (108, 150), (158, 190)]
RIGHT = [(230, 270), (278, 320)]
WORDS = [w for y in (0, 14, 28) for w in _line(y, *LEFT, *RIGHT)]


def test_a_box_in_mid_line_grows_to_its_column_and_not_across_the_gutter() -> None:
    # touches "w58" and "w108" of the second line; the gutter (40 px) is wider than a line (10 px)
    assert line_frame(Box(70, 16, 120, 22), WORDS, 400, 100).as_tuple() == (10, 14, 190, 24)


def test_a_box_over_two_lines_holds_both_whole() -> None:
    # touches the first and second lines' "w108": both lines, whole, from 10 to 190
    assert line_frame(Box(110, 4, 140, 20), WORDS, 400, 100).as_tuple() == (10, 0, 190, 24)


def test_a_box_that_grazes_a_line_does_not_take_it_but_one_that_covers_two_pixels_does() -> None:
    # covers 1 px of the third line (y 28..38): the second line only
    assert line_frame(Box(60, 16, 90, 29), WORDS, 400, 100).as_tuple() == (10, 14, 190, 29)
    # covers 3 px of it: that line is shown whole too
    assert line_frame(Box(60, 16, 90, 31), WORDS, 400, 100).as_tuple() == (10, 14, 190, 38)


def test_the_margin_stops_short_of_the_lines_around() -> None:
    # the second line (y 14..24) between lines ending at y=10 and starting at y=28: 3 px free
    # above and below (one short of each neighbour); 8 px left (the page is free there), and 39
    # px to the right column (190 -> 230) caps nothing
    frame = crop_frame(Box(70, 16, 120, 22), WORDS, 400, 100)
    assert frame.as_tuple() == (2, 11, 198, 27)


def test_without_a_text_layer_the_box_stays_and_a_frame_stays_on_the_page() -> None:
    assert line_frame(Box(5, 5, 50, 50), [], 400, 100).as_tuple() == (5, 5, 50, 50)
    assert line_frame(Box(380, 90, 420, 120), [], 400, 100).as_tuple() == (380, 90, 400, 100)
    assert crop_frame(Box(2, 3, 398, 97), [], 400, 100, pad=6).as_tuple() == (0, 0, 400, 100)


def test_a_crop_is_cut_from_the_page_with_its_box_drawn(tmp_path: Path) -> None:
    page = tmp_path / "page.png"
    Image.new("RGB", (400, 100), "white").save(page)
    png = crop_png(page, Box(10, 14, 190, 24), Box(58, 14, 150, 24), "#ff0000")
    crop = Image.open(io.BytesIO(png)).convert("RGB")
    assert crop.size == (180, 10)
    assert crop.getpixel((48, 0)) == (255, 0, 0) and crop.getpixel((5, 5)) == (255, 255, 255)
    big = tmp_path / "big.png"
    Image.new("RGB", (3000, 200), "white").save(big)
    assert max(Image.open(io.BytesIO(crop_png(big, Box(0, 0, 3000, 200), None))).size) == MAX_CROP_SIDE
