"""Three small pages with text layers, for search and zoom episodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from evidra.core.types import Box, Page, Word

TEXTS = {
    "pA": "quarterly revenue table 2021 revenue grew",
    "pB": "employee headcount chart by region",
    "pC": "revenue forecast for 2022 and outlook",
}


@pytest.fixture()
def pages(tmp_path: Path) -> dict[str, Page]:
    out = {}
    for i, (pid, text) in enumerate(TEXTS.items()):
        path = tmp_path / f"{pid}.png"
        image = Image.new("RGB", (1000, 2000), (255, 255, 255))
        image.paste((10 * i, 0, 0), (100, 200, 300, 400))  # a coloured block to crop
        image.save(path)
        words = tuple(Word(w, Box(10.0 * j, 10.0, 10.0 * j + 8, 20.0)) for j, w in enumerate(text.split()))
        out[pid] = Page(pid, str(path), 1000, 2000, words=words)
    return out
