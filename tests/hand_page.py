"""A hand-made page with a known text layer, for scoring paradigm outputs by hand."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.types import Box, EvidenceBox, Page, Sample, Word

WORDS = (  # text, box (page pixels) on a 200 x 100 page
    ("Revenue", (10, 10, 60, 20)),
    ("2023", (70, 10, 100, 20)),
    ("was", (10, 30, 30, 40)),
    ("$5M", (40, 30, 70, 40)),
)


def make_page(
    tmp: Path, pid: str = "doc-p0001", words: tuple[tuple[str, tuple[int, ...]], ...] = WORDS
) -> Page:
    path = tmp / f"{pid}.png"
    Image.new("RGB", (200, 100), "white").save(path)
    layer = tuple(Word(t, Box(*map(float, b))) for t, b in words)
    return Page(pid, str(path), 200, 100, "doc.pdf", 1, layer)


@pytest.fixture
def page_factory(tmp_path: Path) -> Callable[..., Page]:
    """``page_factory(pid, words)`` -> a 200 x 100 white page with that text layer."""
    return lambda pid="doc-p0001", words=WORDS: make_page(tmp_path, pid, words)


@pytest.fixture
def page(tmp_path: Path) -> Page:
    return make_page(tmp_path)


@pytest.fixture
def sample(page: Page) -> Sample:
    """ "What was revenue in 2023?" -> "$5M", gold box around "$5M"."""
    return Sample(
        id="s1",
        question="What was revenue in 2023",
        answers=("$5M",),
        pages=(page,),
        gold_pages=(page.id,),
        gold_boxes=(EvidenceBox(page.id, Box(40, 30, 70, 40)),),
        gold_evidence={page.id: "Revenue 2023 was $5M"},
        evidence_box=EvidenceBox(page.id, Box(10, 10, 100, 40)),
    )
