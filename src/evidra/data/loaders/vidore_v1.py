"""ViDoRe v1 QA-format datasets, e.g. ``vidore/docvqa_test_subsampled``.

Split ``test`` rows carry ``query`` (None for corpus-only pages), ``image`` and
``image_filename`` plus dataset extras. The official evaluation deduplicates queries and
builds qrels ``{query: {image_filename: 1}}``; page ids are the image file names, and a
duplicated image keeps one page (the official max over duplicates). ``load_vidore_v1_corpus``
gives the pages.
"""

from __future__ import annotations

from pathlib import Path

from evidra.core.types import Page, Sample
from evidra.data.loaders._records import as_str, materialize_page, read_records
from evidra.data.loaders.loader import LOADERS, default_image_dir


def load_vidore_v1(path: str | Path, *, limit: int | None = None, **_: object) -> list[Sample]:
    """One sample per distinct query; gold pages are all images the query was asked about."""
    qrels: dict[str, dict[str, float]] = {}
    for rec in read_records(path):
        query = rec.get("query")
        if query:
            qrels.setdefault(as_str(query), {})[as_str(rec.require("image_filename"))] = 1.0
    samples = [
        Sample(
            f"q{i}",
            q,
            corpus=str(path),
            gold_pages=tuple(judged),
            dataset="vidore_v1",
            qrels=judged,
        )
        for i, (q, judged) in enumerate(qrels.items())
    ]
    return samples[:limit]


def load_vidore_v1_corpus(path: str | Path, *, image_dir: str | Path | None = None) -> list[Page]:
    out_dir = default_image_dir(path, image_dir)
    pages: dict[str, Page] = {}
    for rec in read_records(path):
        name = as_str(rec.require("image_filename"))
        if name not in pages:
            pages[name] = materialize_page(rec.require("image"), rec, page_id=name, image_dir=out_dir)
    return list(pages.values())


LOADERS.add("vidore_v1", load_vidore_v1)
