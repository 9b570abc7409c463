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

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, Page, Sample
from evidra.data.loaders._records import (
    Record,
    as_int,
    as_list,
    as_mapping,
    as_str,
    literal_list,
    materialize_page,
    read_records,
)
from evidra.data.loaders.loader import LOADERS, default_image_dir
from evidra.data.loaders.vidoseek import gold_of

N_SLIDES = 20
IMAGE_TEMPLATE = "images/{deck}/slide_{page}_1024.jpg"


Layout = dict[int, list[dict[str, object]]]  # page -> its boxes: {"id", "class", "box" (xyxy)}


def _boxes(path: str | Path | None) -> dict[str, Layout]:
    out: dict[str, Layout] = {}
    if path is None:
        return out
    for rec in read_records(path):
        deck = out.setdefault(as_str(rec.require("deck_name")), {})
        for entry in as_list(rec.require("bboxes"), rec, "bboxes"):
            pair = as_list(entry, rec, "bboxes")
            if len(pair) != 2:
                raise InvalidInputError(f"{rec.where()}: bboxes holds {entry!r:.80}, not [page, boxes]")
            page, items = pair
            deck[as_int(page, rec, "bboxes")] = [_layout_box(it, rec) for it in as_list(items, rec, "bboxes")]
    return out


def _layout_box(item: object, rec: Record) -> dict[str, object]:
    """One annotated box, its ``bbox`` ``[x, y, w, h]`` converted to xyxy."""
    box = as_mapping(item, rec, "bboxes")
    given = as_list(box.get("bbox"), rec, "bbox")
    xywh = [v for v in given if isinstance(v, (int, float))]
    if len(xywh) != 4 or len(given) != 4:
        raise InvalidInputError(f"{rec.where()}: bbox must be [x, y, w, h], got {given!r:.80}")
    x, y, w, h = xywh
    return {"id": box.get("bbox_id"), "class": box.get("class"), "box": Box.from_xywh(x, y, w, h).as_tuple()}


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
    **_: object,
) -> list[Sample]:
    out_dir = default_image_dir(path, image_dir)
    layout = _boxes(bboxes)
    samples = []
    for rec in list(read_records(path))[:limit]:
        root = Path(images) if images else rec.file.parent
        pages = _deck(rec, root, image_template, out_dir, n_slides)
        evidence = [
            as_int(p, rec, "evidence_pages")
            for p in literal_list(rec.require("evidence_pages"), rec, "evidence_pages")
        ]
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
