"""Four small pages for UniDoc-RL episodes."""

from __future__ import annotations

from pathlib import Path

import pytest
from PIL import Image

from evidra.core.types import Page


@pytest.fixture()
def pages(tmp_path: Path) -> dict[str, Page]:
    out = {}
    for i, pid in enumerate(("p0", "p1", "p2", "p3")):
        path = tmp_path / f"{pid}.png"
        image = Image.new("RGB", (1000, 2000), (255, 255, 255))
        image.paste((40 * i, 0, 0), (100, 200, 300, 400))
        image.save(path)
        out[pid] = Page(pid, str(path), 1000, 2000)
    return out
