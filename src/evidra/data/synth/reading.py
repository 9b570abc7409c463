"""Small pages a tiny model can learn to read: a few large labels and numbers, a table, a chart.

``generate_reading`` draws square pages of ``size`` pixels (168 by default: 36 image tokens of
a Qwen2.5-VL at one token per 28 x 28 pixels) in one of three kinds, in one of three fonts:

* ``words``: two or three lines ``LABEL number`` ("RED 47") at a random place and size;
* ``table``: a gridded two-column table of labels and numbers;
* ``chart``: two or three bars, the label under each bar and its number above it.

Each page asks for the number of one label ("What number is next to RED?", "What is the value
of RED in the table?", "What is the value of the RED bar in the chart?"), so answering means
finding the label on the page and reading the number beside it. The answer's box
(``gold_boxes``) and the box of its line, row or bar (``evidence_box``, with the words of that
line as ``gold_evidence``) come from where the text was drawn (``ImageDraw.textbbox``); every
drawn word is also kept as the page's text layer (``Page.words``), so the offline text-overlap
similarity of LAT's step reward reads these pages like ingested PDFs.

Labels come from a small vocabulary (``LABELS``) that the question names; the split and the seed
choose everything else: layout, sizes, fonts, which labels a page holds and the numbers. Pages of
the ``test`` split are drawn from another random stream than ``train`` pages, so a held-out page
has a layout, numbers and label combination of its own. Fonts: Pillow's scalable default font,
the same drawn bold (a stroke), and Pillow's bitmap font enlarged block by block (a pixel font),
so nothing depends on fonts installed on the machine.

>>> samples = generate_reading("reading/", 4, seed=0, split="test")    # doctest: +SKIP
"""

from __future__ import annotations

import io
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, EvidenceBox, Page, Sample, Word, content_hash, make_page_id

if TYPE_CHECKING:
    from PIL.Image import Image
    from PIL.ImageDraw import ImageDraw
    from PIL.ImageFont import FreeTypeFont

LABELS = ("RED", "BLUE", "GREEN", "GOLD", "PINK", "GRAY")
Kind = Literal["words", "table", "chart"]
Font = Literal["sans", "bold", "pixel"]
KINDS: tuple[Kind, ...] = ("words", "table", "chart")
FONTS: tuple[Font, ...] = ("sans", "bold", "pixel")
DATASET = "synth_reading"
CELL = 28  # pixels of one image token of a Qwen2.5-VL (a 2 x 2 merge of 14-pixel patches)
HALF = CELL // 2  # a column of the grid layout: one 14-pixel patch
GRID_MAX_SIZE = 15  # on the grid a glyph stays inside its 14-pixel column (bold capitals: 13 px)
MAX_SAMPLES = 100_000  # pages per call: a typo of n must not fill the disk


@dataclass
class _Canvas:
    """One page being drawn: the image, its words (the text layer) and the font of the page."""

    image: Image
    draw: ImageDraw
    font: Font
    entries: tuple[int, ...] = (2, 3)  # how many labels a page may hold
    grid: bool = False  # one character per half-token column, each line centred on a token row
    words: list[Word] = field(default_factory=list)

    @property
    def row_step(self) -> float:
        """The vertical step lines are placed on: a token row on the grid, half of one otherwise."""
        return CELL if self.grid else CELL / 2

    def text(self, x: float, y: float, text: str, size: int, below: bool = False) -> Box:
        """Draw ``text`` with its top-left near (x, y); keep it as a word; return its box. On the
        grid the line moves to the token row above its centre (``below``: the row below)."""
        if self.grid:
            box = self._grid_text(x, y + self.height(size) / 2, text, size, below)
        elif self.font == "pixel":
            box = self._pixel_text(x, y, text, size)
        else:
            box = self._vector_text(x, y, text, size)
        self.words.append(Word(text, box))
        return box

    def width(self, text: str, size: int) -> float:
        if self.grid:
            return float(HALF * len(text))
        if self.font == "pixel":
            from PIL import ImageFont

            left, _, right, _ = ImageFont.load_default_imagefont().getbbox(text)
            return (right - left) * _pixel_scale(size)
        return float(_scalable(size).getlength(text)) + (2 if self.font == "bold" else 0)

    def height(self, size: int) -> float:
        """The height of a line of capitals and digits in this font at ``size``."""
        if self.font == "pixel":
            from PIL import ImageFont

            bitmap = ImageFont.load_default_imagefont().getbbox("RED 09")
            return float((bitmap[3] - bitmap[1]) * _pixel_scale(size))
        vector = _scalable(size).getbbox("RED 09")
        return float(vector[3] - vector[1]) + (2 if self.font == "bold" else 0)

    def _grid_text(self, x: float, centre_y: float, text: str, size: int, below: bool) -> Box:
        """Each character centred in its own half-token column, from the column at or after ``x``."""
        rows = self.image.height // CELL
        row = (math.ceil if below else math.floor)((centre_y - CELL / 2) / CELL)
        cy = CELL * min(max(row, 0), rows - 1) + CELL / 2
        columns = self.image.width // HALF
        first = min(max(math.ceil(x / HALF - 1e-6), 0), max(0, columns - len(text)))
        boxes = [
            self._glyph(HALF * (first + k) + HALF / 2, cy, ch, min(size, GRID_MAX_SIZE))
            for k, ch in enumerate(text)
            if not ch.isspace()
        ]
        return _union(boxes)

    def _glyph(self, cx: float, cy: float, ch: str, size: int) -> Box:
        """One character centred at (cx, cy) in the page's font; its box."""
        if self.font == "pixel":
            from PIL import ImageFont

            left, top, right, bottom = ImageFont.load_default_imagefont().getbbox(ch)
            k = _pixel_scale(size)
            return self._pixel_text(cx - (right - left) * k / 2, cy - (bottom - top) * k / 2, ch, size)
        stroke = 1 if self.font == "bold" else 0
        font = _scalable(size)
        self.draw.text(
            (cx, cy), ch, font=font, fill=(0, 0, 0), anchor="mm", stroke_width=stroke, stroke_fill=(0, 0, 0)
        )
        x1, y1, x2, y2 = self.draw.textbbox((cx, cy), ch, font=font, anchor="mm", stroke_width=stroke)
        return Box(float(x1), float(y1), float(x2), float(y2))

    def _vector_text(self, x: float, y: float, text: str, size: int) -> Box:
        """Draw with the ink's top at ``y`` (not the font's ascender line)."""
        stroke = 1 if self.font == "bold" else 0
        font = _scalable(size)
        top = self.draw.textbbox((0, 0), "RED 09", font=font, stroke_width=stroke)[1]
        xy = (x, y - top)
        self.draw.text(xy, text, font=font, fill=(0, 0, 0), stroke_width=stroke, stroke_fill=(0, 0, 0))
        x1, y1, x2, y2 = self.draw.textbbox(xy, text, font=font, stroke_width=stroke)
        return Box(float(x1), float(y1), float(x2), float(y2))

    def _pixel_text(self, x: float, y: float, text: str, size: int) -> Box:
        """Pillow's bitmap font drawn small, then enlarged with nearest-neighbour blocks."""
        from PIL import Image, ImageDraw, ImageFont

        font = ImageFont.load_default_imagefont()
        left, top, right, bottom = font.getbbox(text)
        small = Image.new("L", (right - left, bottom - top), 255)
        ImageDraw.Draw(small).text((-left, -top), text, font=font, fill=0)
        k = _pixel_scale(size)
        big = small.resize((small.width * k, small.height * k), Image.Resampling.NEAREST)
        mask = big.point(lambda v: 255 if v < 128 else 0)
        left_top = (round(x), round(y))
        self.image.paste((0, 0, 0), left_top, mask)
        x0, y0 = float(left_top[0]), float(left_top[1])
        return Box(x0, y0, x0 + big.width, y0 + big.height)


def _pixel_scale(size: int) -> int:
    return max(2, round(size / 10))  # the bitmap font's capitals are about 10 pixels high at scale 1


def _scalable(size: int) -> FreeTypeFont:
    from PIL import ImageFont

    font = ImageFont.load_default(size=size)
    assert isinstance(font, ImageFont.FreeTypeFont), "Pillow >= 10.1 built with FreeType"
    return font


def _union(boxes: Sequence[Box]) -> Box:
    return Box(
        min(b.x1 for b in boxes), min(b.y1 for b in boxes), max(b.x2 for b in boxes), max(b.y2 for b in boxes)
    )


@dataclass(frozen=True)
class _Fact:
    question: str
    answer: str
    answer_box: Box
    evidence_box: Box
    evidence_text: str


def _snapped(rng: random.Random, room: float, step: float = CELL / 2) -> float:
    """A random offset in [4, room] on the half-cell grid: the places of a page's text are few, and
    each line sits on the image tokens' grid (the layout varies, the coordinates to learn repeat)."""
    steps = max(0, int((room - 4) // step))
    return 4 + rng.randint(0, steps) * step


def _entries(rng: random.Random, k: int) -> list[tuple[str, str]]:
    return [(label, str(rng.randint(10, 99))) for label in rng.sample(LABELS, k)]


def _words_page(rng: random.Random, c: _Canvas, side: int) -> list[_Fact]:
    """Two or three ``LABEL number`` lines, left-aligned at a random place."""
    entries = _entries(rng, rng.choice(c.entries))
    size = rng.randint(18, 24)
    widest = max(c.width(f"{label} {value}", size) for label, value in entries)
    x = _snapped(rng, side - widest - 4)
    y = _snapped(rng, side - CELL * len(entries) - 4, c.row_step)
    facts = []
    for k, (label, value) in enumerate(entries):
        top = y + k * CELL + (CELL - c.height(size)) / 2
        label_box = c.text(x, top, label, size)
        gap = x + c.width(f"{label} ", size) if c.grid else label_box.x2 + size * 0.4
        value_box = c.text(gap, top, value, size)
        question = f"What number is next to {label}?"
        facts.append(_Fact(question, value, value_box, _union([label_box, value_box]), f"{label} {value}"))
    return facts


def _table_page(rng: random.Random, c: _Canvas, side: int) -> list[_Fact]:
    """A gridded table: a label column and a number column, two or three rows."""
    entries = _entries(rng, rng.choice(c.entries))
    size = rng.randint(14, 18)
    row_h = float(CELL)
    pad = (row_h - c.height(size)) / 2
    across = HALF if c.grid else pad  # on the grid: one empty column each side of a cell's text
    col0 = max(c.width(label, size) for label, _ in entries) + 2 * across
    col1 = c.width("99", size) + 2 * across
    x = _snapped(rng, side - col0 - col1 - 4)
    y = _snapped(rng, side - row_h * len(entries) - 4, c.row_step)
    if c.grid:  # the cells' borders on the token grid's lines
        x, y = HALF * round(x / HALF), CELL * round(y / CELL)
    facts = []
    for k, (label, value) in enumerate(entries):
        top = y + k * row_h
        c.draw.rectangle([x, top, x + col0 + col1, top + row_h], outline=(0, 0, 0))
        c.draw.line([(x + col0, top), (x + col0, top + row_h)], fill=(0, 0, 0))
        c.text(x + across, top + pad, label, size)
        value_box = c.text(x + col0 + across, top + pad, value, size)
        row = Box(x, top, x + col0 + col1, top + row_h)
        question = f"What is the value of {label} in the table?"
        facts.append(_Fact(question, value, value_box, row, f"{label} {value}"))
    return facts


def _chart_page(rng: random.Random, c: _Canvas, side: int) -> list[_Fact]:
    """Two or three bars on a baseline: the number above each bar, its label below."""
    entries = _entries(rng, rng.choice(c.entries))
    size = rng.randint(12, 14) if len(entries) == 3 else rng.randint(14, 18)
    slot = (side - 8) / len(entries)
    line = c.height(size)
    base = side - line - 8
    top_space = line * 1.4 + 4
    c.draw.line([(4, base), (side - 4, base)], fill=(0, 0, 0))
    facts = []
    for k, (label, value) in enumerate(entries):
        centre = 4 + slot * (k + 0.5)
        height = (base - top_space) * int(value) / 100
        bar = Box(centre - slot * 0.25, base - height, centre + slot * 0.25, base)
        c.draw.rectangle([bar.x1, bar.y1, bar.x2, bar.y2], fill=rng.choice(((60, 110, 190), (90, 90, 90))))
        value_box = c.text(centre - c.width(value, size) / 2, bar.y1 - line - 4, value, size)
        label_box = c.text(centre - c.width(label, size) / 2, base + 3, label, size, below=True)
        question = f"What is the value of the {label} bar in the chart?"
        evidence = _union([bar, value_box, label_box])
        facts.append(_Fact(question, value, value_box, evidence, f"{label} {value}"))
    return facts


_KIND_DRAW = {"words": _words_page, "table": _table_page, "chart": _chart_page}


def _page(
    rng: random.Random, kind: Kind, side: int, entries: tuple[int, ...], grid: bool
) -> tuple[bytes, list[Word], _Fact]:
    """One page of ``kind``: its PNG bytes, its text layer and the fact it asks about."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (side, side), "white")
    canvas = _Canvas(image, ImageDraw.Draw(image), rng.choice(FONTS), entries, grid)
    facts = _KIND_DRAW[kind](rng, canvas, side)
    buf = io.BytesIO()
    image.save(buf, format="PNG", compress_level=3)
    return buf.getvalue(), canvas.words, rng.choice(facts)


def generate_reading(
    out_dir: str | Path,
    n: int,
    *,
    seed: int = 0,
    split: str = "train",
    size: int = 168,
    entries: tuple[int, ...] = (2, 3),
    grid: bool = False,
) -> list[Sample]:
    """``n`` one-page samples (kinds in turn: words, table, chart) written as PNGs under ``out_dir``.

    ``entries``: how many labels a page may hold (``(1,)``: one, so the question's label is the only
    one on the page and answering is reading its number). ``grid``: every character centred in its
    own 14-pixel column and every line on a 28-pixel token row, so no glyph straddles two image
    tokens (what a tiny tower learns to read; docs/learning.md). The same arguments give the same
    pages, page ids and questions.
    """
    if not entries or not all(1 <= k <= len(LABELS) for k in entries):
        raise InvalidInputError(
            f"reading pages: entries must be 1-{len(LABELS)} labels per page, got {entries}"
        )
    if not 0 <= n <= MAX_SAMPLES:
        raise InvalidInputError(f"reading pages: n must be between 0 and {MAX_SAMPLES}, got {n}")
    if not 112 <= size <= 1024:
        raise InvalidInputError(f"reading pages: size must be 112-1024 pixels, got {size}")
    rng = random.Random(f"reading/{split}/{seed}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    samples = []
    for i in range(n):
        kind = KINDS[i % len(KINDS)]
        data, words, fact = _page(rng, kind, size, entries, grid)
        sid = f"reading-{split}-{seed}-{i:04d}"
        path = out / f"{sid}.png"
        path.write_bytes(data)
        page = Page(make_page_id(content_hash(data), 1), str(path), size, size, path.name, 1, tuple(words))
        samples.append(_sample(sid, page, kind, fact))
    return samples


def _sample(sid: str, page: Page, kind: Kind, fact: _Fact) -> Sample:
    return Sample(
        id=sid,
        question=fact.question,
        answers=(fact.answer,),
        pages=(page,),
        gold_pages=(page.id,),
        gold_boxes=(EvidenceBox(page.id, fact.answer_box),),
        gold_evidence={page.id: fact.evidence_text},
        answer_type="str",
        dataset=DATASET,
        extras={"kind": kind, "source": page.source},
        evidence_box=EvidenceBox(page.id, fact.evidence_box),
    )
