"""Drawing and packaging helpers shared by the synthetic visual-reasoning generators.

Samples follow CAVE's unified prompt-answer-perception format (CAVE App. B, Table 8): the
prompt is the question, the answer is the gold label and the perception field (key
intermediate evidence, never shown to the model) goes to ``gold_evidence`` of the page that
holds it and to ``extras["perception"]``. ``to_record`` gives the JSONL row of that format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from evidra.types import Page, Sample

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 20, 20), "orange": (255, 140, 0), "yellow": (240, 220, 0), "green": (20, 160, 40),
    "blue": (20, 60, 220), "purple": (128, 0, 160), "magenta": (230, 0, 230), "pink": (255, 150, 190),
    "cyan": (0, 210, 230), "gray": (128, 128, 128), "lime": (150, 240, 0), "teal": (0, 128, 128),
    "gold": (200, 160, 0), "black": (0, 0, 0), "brown": (140, 80, 20),
}  # fmt: skip

Point = tuple[float, float]


def regular_polygon(cx: float, cy: float, r: float, sides: int, angle: float = 0.0) -> list[Point]:
    """Vertices of a regular polygon (32 sides stand in for a circle, so transforms stay exact)."""
    return [
        (
            cx + r * math.cos(angle + 2 * math.pi * k / sides),
            cy + r * math.sin(angle + 2 * math.pi * k / sides),
        )
        for k in range(sides)
    ]


def transform_points(points: Sequence[Point], angle: float, scale: float, center: Point) -> list[Point]:
    """Rotate by ``angle`` (radians) and scale about ``center``."""
    c, s = math.cos(angle), math.sin(angle)
    ox, oy = center
    return [
        (ox + scale * (c * (x - ox) - s * (y - oy)), oy + scale * (s * (x - ox) + c * (y - oy)))
        for x, y in points
    ]


def save_sample(
    images: Sequence[Image.Image], out: Path, sid: str, prompt: str, answer: str, evidence: str,
    dataset: str, meta: dict[str, Any],
) -> Sample:  # fmt: skip
    """Write the images as PNG pages and build the sample; the evidence sits on the last page."""
    pages = []
    for k, image in enumerate(images, 1):
        path = out / f"{sid}-{k}.png"
        image.save(path, format="PNG")
        pages.append(Page(f"{sid}-p{k}", str(path), image.width, image.height, source=path.name))
    return Sample(
        id=sid,
        question=prompt,
        answers=(answer,),
        pages=tuple(pages),
        gold_pages=(pages[-1].id,),
        gold_evidence={pages[-1].id: evidence},
        dataset=dataset,
        extras={"perception": evidence, "meta": meta, "construction": "evidra synthetic (own construction)"},
    )


def to_record(sample: Sample, root: Path) -> str:
    """One JSONL row in CAVE's format: id, image (relative path), prompt, answer, perception."""
    images = [str(Path(p.image_path).relative_to(root)) for p in sample.pages]
    row = {"id": sample.id, "image": images[0] if len(images) == 1 else images, "prompt": sample.question,
           "answer": sample.answers[0], "perception": sample.extras.get("perception", "")}  # fmt: skip
    return json.dumps(row)
