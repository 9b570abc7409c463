"""SlideVQA: 20-slide decks, 1-based evidence pages, xywh boxes.

QA JSONL rows carry ``deck_name``, ``qa_id``, ``question``, ``answer``, ``evidence_pages``
(1-based), ``reasoning_type``, ``answer_type``, ``arithmetic_expression``. Slide images are read
from ``images/{deck}/slide_{page}_1024.jpg`` (``image_template=``). The optional boxes file
(``bboxes=``, JSONL rows ``{"deck_name", "bboxes": [[page, [{"bbox_id","class","bbox":[x,y,w,h]}]]]}``)
adds each deck's annotated layout boxes, converted to xyxy, under ``extras["layout_boxes"]``:
they describe slide regions, not the answer's evidence, so they are not gold boxes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evidra.core.types import Box, Page, Sample
from evidra.data.loaders._records import Record, as_str, literal_list, materialize_page, read_records
from evidra.data.loaders.loader import LOADERS, default_image_dir
from evidra.data.loaders.vidoseek import gold_of

N_SLIDES = 20
IMAGE_TEMPLATE = "images/{deck}/slide_{page}_1024.jpg"


def _boxes(path: str | Path | None) -> dict[str, dict[int, list[dict[str, Any]]]]:
    out: dict[str, dict[int, list[dict[str, Any]]]] = {}
    if path is None:
        return out
    for rec in read_records(path):
        deck = out.setdefault(as_str(rec.require("deck_name")), {})
        for page, items in rec.require("bboxes"):
            deck[int(page)] = [
                {
                    "id": it.get("bbox_id"),
                    "class": it.get("class"),
                    "box": Box.from_xywh(*it["bbox"]).as_tuple(),
                }
                for it in items
            ]
    return out


def _deck(rec: Record, root: Path, template: str, out_dir: Path, n: int) -> list[Page]:
    deck = as_str(rec.require("deck_name"))
    return [
        materialize_page(
            template.format(deck=deck, page=p),
            rec,
            page_id=f"{deck}_{p}",
            image_dir=out_dir,
            base=root,  # the template is relative to the images root (a relative root is not doubled)
            source=deck,
            page_number=p,
        )
        for p in range(1, n + 1)
    ]


def load_slidevqa(
    path: str | Path,
    *,
    images: str | Path | None = None,
    image_template: str = IMAGE_TEMPLATE,
    bboxes: str | Path | None = None,
    n_slides: int = N_SLIDES,
    image_dir: str | Path | None = None,
    limit: int | None = None,
    **_: Any,
) -> list[Sample]:
    out_dir = default_image_dir(path, image_dir)
    layout = _boxes(bboxes)
    samples = []
    for rec in list(read_records(path))[:limit]:
        root = Path(images) if images else rec.file.parent
        pages = _deck(rec, root, image_template, out_dir, n_slides)
        evidence = [int(p) for p in literal_list(rec.require("evidence_pages"), rec, "evidence_pages")]
        deck = as_str(rec.require("deck_name"))
        samples.append(
            Sample(
                id=as_str(rec.require("qa_id")),
                question=as_str(rec.require("question")),
                answers=(as_str(rec.require("answer")),),
                pages=tuple(pages),
                gold_pages=gold_of(rec, pages, evidence, "evidence_pages"),
                dataset="slidevqa",
                extras={
                    "deck_name": deck,
                    "evidence_pages": evidence,
                    "reasoning_type": as_str(rec.get("reasoning_type")),
                    "answer_type": as_str(rec.get("answer_type")),
                    "arithmetic_expression": as_str(rec.get("arithmetic_expression")),
                    "layout_boxes": {p: layout[deck][p] for p in evidence if p in layout.get(deck, {})},
                },
            )
        )
    return samples


LOADERS.add("slidevqa", load_slidevqa)
