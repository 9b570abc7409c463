"""ChartQA, scored with relaxed accuracy.

Three published layouts are read, recognised by their columns: ``HuggingFaceM4/ChartQA``
(``image``, ``query``, ``label`` list, ``human_or_machine`` 0/1), ``lmms-lab/ChartQA`` (``type``
human_test/augmented_test, ``question``, ``answer``, ``image``) and the original repo JSON
(``imgname``, ``query``, ``label``; images under ``png/`` beside the JSON or in ``images=``).
"""

from __future__ import annotations

from pathlib import Path

from evidra.core.types import Sample
from evidra.data.loaders._records import Record, as_str, literal_list, materialize_page, read_records
from evidra.data.loaders.loader import LOADERS, default_image_dir

_SUBSET = {0: "human", 1: "augmented", "human_test": "human", "augmented_test": "augmented"}


def _answers(rec: Record) -> tuple[str, ...]:
    if "label" in rec.data:
        label = rec.data["label"]
        return tuple(
            as_str(v)
            for v in (
                literal_list(label, rec, "label")
                if not isinstance(label, str) or label.startswith("[")
                else [label]
            )
        )
    return (as_str(rec.require("answer")),)


def _image_cell(rec: Record, images: Path | None) -> tuple[object, Path | None]:
    """The image cell and the folder its path resolves against (``images``, else ``png/``)."""
    if rec.get("image") is not None:
        return rec.data["image"], None
    return as_str(rec.require("imgname")), images or rec.file.parent / "png"


def load_chartqa(
    path: str | Path,
    *,
    image_dir: str | Path | None = None,
    images: str | Path | None = None,
    limit: int | None = None,
    **_: object,
) -> list[Sample]:
    out_dir = default_image_dir(path, image_dir)
    samples = []
    for n, rec in enumerate(read_records(path)):
        if limit is not None and n >= limit:
            break
        sid = as_str(rec.get("id") or f"{rec.file.stem}-{rec.index}")
        cell, base = _image_cell(rec, Path(images) if images else None)
        page = materialize_page(cell, rec, page_id=f"{sid}-img", image_dir=out_dir, base=base)
        subset = _SUBSET.get(rec.get("human_or_machine", rec.get("type")), "")
        samples.append(
            Sample(
                id=sid,
                question=as_str(rec.require_any("query", "question")),
                answers=_answers(rec),
                pages=(page,),
                gold_pages=(page.id,),
                dataset="chartqa",
                extras={"subset": subset},
            )
        )
    return samples


LOADERS.add("chartqa", load_chartqa)
