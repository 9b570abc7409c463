"""The region of a page a crop shows: a cited box grown to the whole lines of text it touches.

A box a model cites, or a searched word, seldom starts and ends where a line does, and a crop
centred on it cuts the words at both edges. ``line_frame`` reads the page's text layer: the
words the box touches name the lines it is on, and the frame grows sideways along those lines
word by word while the next word is nearer than a line's height (so it stops at a column's
gutter, not at the page's edge), and up and down to hold those words whole. A page without a
text layer, or a box that touches no word, keeps the box. ``crop_frame`` adds a margin that
stops short of the lines around it, and ``crop_png`` cuts that frame out of the page image for a
file that carries its evidence (an exported answer).
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from statistics import median

from evidra.core.types import Box, Word

PAD = 8.0  # page pixels of margin kept around a frame, where no other word is
MIN_COVER = 2.0  # page pixels of a word's height a box must cover to take the word's line
MAX_CROP_SIDE = 1000  # pixels of an exported crop's longest side (a larger one is scaled down)


def _touches(word: Box, box: Box) -> bool:
    """Whether ``box`` covers part of ``word``: ``MIN_COVER`` pixels of its height (or half of it,
    for a word that small), any of its width."""
    dy = min(word.y2, box.y2) - max(word.y1, box.y1)
    dx = min(word.x2, box.x2) - max(word.x1, box.x1)
    return dx > 0 and dy >= min(MIN_COVER, 0.5 * (word.y2 - word.y1))


def line_frame(box: Box, words: Sequence[Word], width: float, height: float) -> Box:
    """``box`` grown to the whole lines it touches (see the module docstring), inside the page.

    >>> w = lambda t, x0, x1, y: Word(t, Box(x0, y, x1, y + 10))
    >>> line = [w("The", 0, 20, 0), w("river", 25, 55, 0), w("flows", 60, 90, 0), w("far", 200, 220, 0)]
    >>> line_frame(Box(30, 2, 70, 8), line, 300, 100).as_tuple()    # stops at the gutter before "far"
    (0, 0, 90, 10)
    >>> line_frame(Box(30, 50, 70, 60), line, 300, 100).as_tuple()   # no word touched: the box
    (30, 50, 70, 60)
    """
    boxes = [w.box for w in words if w.box.x2 > w.box.x1 and w.box.y2 > w.box.y1]
    touched = [b for b in boxes if _touches(b, box)]
    if not touched:
        return _inside(box, width, height)
    top, bottom = min(b.y1 for b in touched), max(b.y2 for b in touched)
    rows = [b for b in boxes if top <= (b.y1 + b.y2) / 2 <= bottom]  # the lines the box is on
    gap = median(b.y2 - b.y1 for b in touched)  # a word space is narrower than a line is high
    left, right = min(box.x1, *(b.x1 for b in touched)), max(box.x2, *(b.x2 for b in touched))
    for b in sorted(rows, key=lambda b: b.x1):
        if b.x1 <= right + gap and b.x2 > right:
            right = b.x2
    for b in sorted(rows, key=lambda b: -b.x2):
        if b.x2 >= left - gap and b.x1 < left:
            left = b.x1
    held = [b for b in rows if b.x2 > left and b.x1 < right]
    y1 = min(box.y1, *(b.y1 for b in held)) if held else box.y1
    y2 = max(box.y2, *(b.y2 for b in held)) if held else box.y2
    return _inside(Box(left, y1, right, y2), width, height)


def _within(word: Box, frame: Box) -> bool:
    return frame.x1 <= word.x1 and word.x2 <= frame.x2 and frame.y1 <= word.y1 and word.y2 <= frame.y2


def _inside(box: Box, width: float, height: float) -> Box:
    x1, y1 = min(max(box.x1, 0.0), width), min(max(box.y1, 0.0), height)
    return Box(x1, y1, max(x1, min(box.x2, width)), max(y1, min(box.y2, height)))


def crop_frame(box: Box, words: Sequence[Word], width: float, height: float, pad: float = PAD) -> Box:
    """``line_frame`` with up to ``pad`` pixels of margin on each side, short of any word outside
    it: a crop shows its lines whole and no part of the lines around them.

    >>> w = lambda t, x0, x1, y: Word(t, Box(x0, y, x1, y + 10))
    >>> text = [w("one", 0, 40, 0), w("two", 0, 40, 14), w("three", 0, 40, 28)]
    >>> crop_frame(Box(5, 15, 30, 20), text, 100, 100).as_tuple()   # 3 px free above and below
    (0.0, 11, 48.0, 27)
    """
    frame = line_frame(box, words, width, height)
    others = [w.box for w in words if not _within(w.box, frame)]
    beside = [b for b in others if b.y1 < frame.y2 and b.y2 > frame.y1]  # on the frame's lines
    across = [b for b in others if b.x1 < frame.x2 and b.x2 > frame.x1]  # above or below it
    left = min([pad, *(frame.x1 - b.x2 - 1 for b in beside if b.x2 <= frame.x1)])
    right = min([pad, *(b.x1 - frame.x2 - 1 for b in beside if b.x1 >= frame.x2)])
    up = min([pad, *(frame.y1 - b.y2 - 1 for b in across if b.y2 <= frame.y1)])
    down = min([pad, *(b.y1 - frame.y2 - 1 for b in across if b.y1 >= frame.y2)])
    room = [max(0.0, r) for r in (left, up, right, down)]
    grown = Box(frame.x1 - room[0], frame.y1 - room[1], frame.x2 + room[2], frame.y2 + room[3])
    return _inside(grown, width, height)


def crop_png(image: Path, frame: Box, box: Box | None, color: str = "#2563eb") -> bytes:
    """The ``frame`` of the page image at ``image`` as PNG bytes, ``box`` outlined on it, its
    longest side at most ``MAX_CROP_SIDE`` pixels."""
    from PIL import Image, ImageDraw

    from evidra.core.imagefiles import decode

    page = decode(image, f"page image {image.name}")
    x1, y1 = int(frame.x1), int(frame.y1)
    region = page.crop((x1, y1, max(int(frame.x2), x1 + 1), max(int(frame.y2), y1 + 1)))
    if box is not None:
        draw = ImageDraw.Draw(region)
        outline = (box.x1 - frame.x1, box.y1 - frame.y1, box.x2 - frame.x1, box.y2 - frame.y1)
        draw.rectangle(outline, outline=color, width=2)
    region.thumbnail((MAX_CROP_SIDE, MAX_CROP_SIDE), Image.Resampling.LANCZOS)
    out = io.BytesIO()
    region.save(out, format="PNG", optimize=False)
    return out.getvalue()
