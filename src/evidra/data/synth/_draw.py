"""Drawing and packaging helpers shared by the synthetic visual-reasoning generators.

Samples follow CAVE's unified prompt-answer-perception format (CAVE App. B, Table 8): the
prompt is the question, the answer is the gold label and the perception field (key
intermediate evidence, never shown to the model) goes to ``gold_evidence`` of the page that
holds it and to ``extras["perception"]``. The perception field never restates the answer (CAVE
App. B.3: "avoid redundant explanations or direct restatements of the final answer"). The region
that holds the evidence, where a zoom should look, is ``Sample.evidence_box``. ``to_record``
gives the JSONL row of that format.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from PIL import Image

from evidra.core.types import Box, EvidenceBox, Page, Sample

COLORS: dict[str, tuple[int, int, int]] = {
    "red": (220, 20, 20),
    "orange": (255, 140, 0),
    "yellow": (240, 220, 0),
    "green": (20, 160, 40),
    "blue": (20, 60, 220),
    "purple": (128, 0, 160),
    "magenta": (230, 0, 230),
    "pink": (255, 150, 190),
    "cyan": (0, 210, 230),
    "gray": (128, 128, 128),
    "lime": (150, 240, 0),
    "teal": (0, 128, 128),
    "gold": (200, 160, 0),
    "black": (0, 0, 0),
    "brown": (140, 80, 20),
}

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


Region = tuple[int, tuple[float, float, float, float]]  # (image index, (x1, y1, x2, y2) in its pixels)


def region_around(points: Sequence[Point], margin: float) -> tuple[float, float, float, float]:
    """The box around ``points`` grown by ``margin`` on every side.

    >>> region_around([(10, 20), (30, 5)], 4)
    (6, 1, 34, 24)
    """
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    return (min(xs) - margin, min(ys) - margin, max(xs) + margin, max(ys) + margin)


def _evidence_box(pages: Sequence[Page], region: Region) -> EvidenceBox:
    """``region`` clipped to its image, as an ``EvidenceBox`` in page pixels."""
    page = pages[region[0]]
    x1, y1, x2, y2 = region[1]
    x1, x2 = max(0.0, min(x1, page.width)), max(0.0, min(x2, page.width))
    y1, y2 = max(0.0, min(y1, page.height)), max(0.0, min(y2, page.height))
    return EvidenceBox(page.id, Box(round(x1), round(y1), round(x2), round(y2)))


def save_sample(
    images: Sequence[Image.Image],
    out: Path,
    sid: str,
    prompt: str,
    answer: str,
    evidence: str,
    dataset: str,
    meta: Mapping[str, object],
    region: Region | None = None,
) -> Sample:
    """Write the images as PNG pages and build the sample; the evidence text sits on the last
    page, ``region`` (the part of one image that holds the evidence) is its ``evidence_box``."""
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
        evidence_box=_evidence_box(pages, region) if region is not None else None,
    )


def to_record(sample: Sample, root: Path) -> str:
    """One JSONL row in CAVE's format: id, image (relative path), prompt, answer, perception."""
    images = [str(Path(p.image_path).relative_to(root)) for p in sample.pages]
    row = {
        "id": sample.id,
        "image": images[0] if len(images) == 1 else images,
        "prompt": sample.question,
        "answer": sample.answers[0],
        "perception": sample.extras.get("perception", ""),
    }
    return json.dumps(row)
