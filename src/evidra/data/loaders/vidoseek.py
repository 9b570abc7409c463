"""ViDoSeek (ViDoRAG): questions over a PDF collection, 1-based pages.

``{"examples": [{"uid", "query", "reference_answer", "meta_info": {"file_name", "reference_page",
"source_type", "query_type"}}]}``; PDFs from ``vidoseek_pdf_document.zip`` are rendered into a
page store. Retrieval ids follow the official ``{pdfstem}_{page}`` convention (kept in
``extras["beir_gold"]``); ``query_type`` values such as ``Multi-Hop_2`` are split on ``_``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Sample
from evidra.data.loaders._documents import documents_loader
from evidra.data.loaders._records import Record, as_int, as_mapping, as_str, literal_list
from evidra.data.loaders.loader import LOADERS


def gold_of(rec: Record, pages: list[Page], numbers: Sequence[int], name: str) -> tuple[str, ...]:
    """Page ids of 1-based page ``numbers``; an error naming the record if one is out of range."""
    out = []
    for n in numbers:
        if not 1 <= int(n) <= len(pages):
            raise InvalidInputError(f"{rec.where()}: {name} {n} outside the document's {len(pages)} pages")
        out.append(pages[int(n) - 1].id)
    return tuple(out)


def _sample(rec: Record, docs: dict[str, list[Page]]) -> Sample:
    meta = as_mapping(rec.require("meta_info"), rec, "meta_info")
    file_name = as_str(meta.get("file_name"))
    if file_name not in docs:
        raise InvalidInputError(f"{rec.where()}: document {file_name!r} is not among the ingested PDFs")
    pages = docs[file_name]
    ref = [
        as_int(p, rec, "reference_page")
        for p in literal_list(meta.get("reference_page") or [], rec, "reference_page")
    ]
    qtype = as_str(meta.get("query_type")).split("_")
    stem = Path(file_name).stem
    return Sample(
        id=as_str(rec.require("uid")),
        question=as_str(rec.require("query")),
        answers=(as_str(rec.require("reference_answer")),),
        pages=tuple(pages),
        gold_pages=gold_of(rec, pages, ref, "reference_page"),
        dataset="vidoseek",
        extras={
            "file_name": file_name,
            "source_type": as_str(meta.get("source_type")),
            "query_type": qtype[0],
            "hops": qtype[1] if len(qtype) > 1 else "",
            "beir_gold": [f"{stem}_{p}" for p in ref],
        },
    )


load_vidoseek = documents_loader(_sample, list_key="examples")

LOADERS.add("vidoseek", load_vidoseek)
