"""MMLongBench-Doc: long PDFs, string-encoded lists, 1-based pages.

``data/samples.json`` is a list of ``{"doc_id": "X.pdf", "doc_type", "question", "answer",
"evidence_pages": "[19, 20]", "evidence_sources": "['Table']", "answer_format"}``;
``answer_format == "None"`` rows answer "Not answerable" and load as unanswerable.
"""

from __future__ import annotations

from evidra.core.errors import InvalidInputError
from evidra.core.types import AnswerType, Page, Sample
from evidra.data.loaders._documents import documents_loader
from evidra.data.loaders._records import Record, as_int, as_str, literal_list
from evidra.data.loaders.loader import LOADERS
from evidra.data.loaders.vidoseek import gold_of

_FORMATS: dict[str, AnswerType] = {
    "Int": "int",
    "Float": "float",
    "Str": "str",
    "List": "list",
    "None": "none",
}


def _sample(rec: Record, docs: dict[str, list[Page]]) -> Sample:
    doc_id = as_str(rec.require("doc_id"))
    if doc_id not in docs:
        raise InvalidInputError(f"{rec.where()}: document {doc_id!r} is not among the ingested PDFs")
    pages = docs[doc_id]
    fmt = as_str(rec.require("answer_format"))
    if fmt not in _FORMATS:
        raise InvalidInputError(f"{rec.where()}: answer_format {fmt!r} is not one of {sorted(_FORMATS)}")
    evidence = [
        as_int(p, rec, "evidence_pages")
        for p in literal_list(rec.get("evidence_pages") or "[]", rec, "evidence_pages")
    ]
    sources = literal_list(rec.get("evidence_sources") or "[]", rec, "evidence_sources")
    return Sample(
        id=f"{doc_id}#{rec.index}",
        question=as_str(rec.require("question")),
        answers=(as_str(rec.require("answer")),),
        pages=tuple(pages),
        gold_pages=gold_of(rec, pages, evidence, "evidence_pages"),
        answerable=fmt != "None",
        answer_type=_FORMATS[fmt],
        dataset="mmlongbench",
        extras={
            "doc_id": doc_id,
            "doc_type": as_str(rec.get("doc_type")),
            "evidence_sources": [as_str(s) for s in sources],
            "evidence_pages": evidence,
            "page_kind": "cross" if len(evidence) > 1 else "single" if evidence else "none",
        },
    )


load_mmlongbench = documents_loader(_sample)

LOADERS.add("mmlongbench", load_mmlongbench)
