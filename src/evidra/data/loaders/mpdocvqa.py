"""MP-DocVQA: multi-page documents, ANLS plus answer-page accuracy (APPA).

The original JSON (``{"data": [...]}``) lists ``page_ids`` whose images live at
``images/{page_id}.jpg`` and a 0-based ``answer_page_idx``. ``lmms-lab/MP-DocVQA`` stores every
field as a string: ``answers`` and ``page_ids`` are Python list literals and the images are in
``image_1 .. image_20`` (None-padded).
"""

from __future__ import annotations

from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Sample
from evidra.data.loaders._records import (
    Record,
    as_int,
    as_str,
    literal_list,
    materialize_page,
    read_records,
)
from evidra.data.loaders.loader import LOADERS, default_image_dir

MAX_PAGES = 20


def _pages(rec: Record, page_ids: list[str], images: Path, out_dir: Path) -> tuple[Page, ...]:
    cells = [rec.get(f"image_{i}") for i in range(1, MAX_PAGES + 1)]
    inline = [c for c in cells if c is not None]
    if inline and len(inline) != len(page_ids):
        raise InvalidInputError(f"{rec.where()}: {len(inline)} images for {len(page_ids)} page_ids")
    sources = inline or [f"{pid}.jpg" for pid in page_ids]  # named files resolve against ``images``
    base = None if inline else images
    doc = as_str(rec.get("doc_id"))
    return tuple(
        materialize_page(cell, rec, page_id=pid, image_dir=out_dir, base=base, source=doc, page_number=n + 1)
        for n, (pid, cell) in enumerate(zip(page_ids, sources, strict=True))
    )


def load_mpdocvqa(
    path: str | Path,
    *,
    image_dir: str | Path | None = None,
    images: str | Path | None = None,
    limit: int | None = None,
    **_: object,
) -> list[Sample]:
    out_dir = default_image_dir(path, image_dir)
    samples = []
    for rec in list(read_records(path, list_key="data"))[:limit]:
        page_ids = [as_str(p) for p in literal_list(rec.require("page_ids"), rec, "page_ids")]
        pages = _pages(rec, page_ids, Path(images) if images else rec.file.parent / "images", out_dir)
        idx_raw = rec.get("answer_page_idx")
        idx = as_int(idx_raw, rec, "answer_page_idx") if idx_raw not in (None, "") else None
        if idx is not None and not 0 <= idx < len(pages):
            raise InvalidInputError(f"{rec.where()}: answer_page_idx {idx} outside {len(pages)} pages")
        samples.append(
            Sample(
                id=as_str(rec.require("questionId")),
                question=as_str(rec.require("question")),
                answers=tuple(as_str(a) for a in literal_list(rec.get("answers") or [], rec, "answers")),
                pages=pages,
                gold_pages=(pages[idx].id,) if idx is not None else (),
                dataset="mpdocvqa",
                extras={"doc_id": as_str(rec.get("doc_id")), "answer_page_idx": idx},
            )
        )
    return samples


LOADERS.add("mpdocvqa", load_mpdocvqa)
