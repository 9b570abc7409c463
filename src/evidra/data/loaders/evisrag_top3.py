"""EVisRAG's test sets: each question with the top-3 pages VisRAG-Ret retrieved for it.

EVisRAG evaluates on ChartQA, InfoVQA, MP-DocVQA, SlideVQA and ViDoSeek questions, each shown
with the three pages the VisRAG retriever ranked first, and labels each question sufficient when
every gold page is among them (EVisRAG §4, App. A.1). The released test files are one folder per
benchmark (``EVisRAG-Test-<name>/``) holding ``top3_test.jsonl``, one record a line::

    {"qid": "...", "query": "...", "image": ["imgs/a.png", "imgs/b.png", "imgs/c.png"],
     "answer": ["..."], "is_sufficient": true}

``image`` lists the retrieved pages in rank order, as paths relative to the file's folder (or to
the ``images`` option); the evaluation prompts with the first ``topk`` of them (3). Page ids are
those paths as written, so a page retrieved for several questions is one page. The records name
no gold page: ``gold_pages`` stays empty and ``sufficient`` carries the label, against which
EVisRAG's Acc / F1 score an insufficient question as "insufficient to answer".
"""

from __future__ import annotations

from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.types import Sample
from evidra.data.loaders._records import Record, as_str, literal_list, materialize_page, read_records
from evidra.data.loaders.loader import LOADERS, default_image_dir

DEFAULT_TOPK = 3  # EVisRAG prompts with the top-3 retrieved pages


def _sufficient(rec: Record) -> bool:
    value = rec.require("is_sufficient")
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise InvalidInputError(f"{rec.where()}: is_sufficient must be true or false, got {value!r}")


def _answers(rec: Record) -> tuple[str, ...]:
    value = rec.require("answer")
    items = (
        [value]
        if isinstance(value, str) and not value.startswith("[")
        else literal_list(value, rec, "answer")
    )
    return tuple(as_str(a) for a in items)


def _sample(rec: Record, topk: int, out_dir: Path, images: Path | None) -> Sample:
    qid = as_str(rec.require("qid"))
    paths = [as_str(p) for p in literal_list(rec.require("image"), rec, "image")][:topk]
    if not paths:
        raise InvalidInputError(f"{rec.where()}: question {qid!r} lists no retrieved image")
    pages = tuple(materialize_page(p, rec, page_id=p, image_dir=out_dir, base=images) for p in paths)
    return Sample(
        id=qid,
        question=as_str(rec.require("query")),
        answers=_answers(rec),
        pages=pages,
        sufficient=_sufficient(rec),
        dataset="evisrag_top3",
        extras={"benchmark": rec.file.parent.name, "retrieved": [p.id for p in pages]},
    )


def load_evisrag_top3(
    path: str | Path,
    *,
    topk: int = DEFAULT_TOPK,
    images: str | Path | None = None,
    image_dir: str | Path | None = None,
    limit: int | None = None,
    **_: object,
) -> list[Sample]:
    """Samples of a ``top3_test.jsonl`` (or a folder holding one per benchmark), each with its
    first ``topk`` retrieved pages and its sufficiency label."""
    if topk < 1:
        raise InvalidInputError(f"topk must be >= 1 (EVisRAG uses 3), got {topk}")
    out_dir = default_image_dir(path, image_dir)
    base = Path(images) if images else None
    samples = []
    for n, rec in enumerate(read_records(path)):
        if limit is not None and n >= limit:
            break
        samples.append(_sample(rec, topk, out_dir, base))
    return samples


LOADERS.add("evisrag_top3", load_evisrag_top3)
