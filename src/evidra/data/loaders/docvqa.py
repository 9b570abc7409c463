"""DocVQA single-page (its published record format), scored with ANLS.

Reads ``lmms-lab/DocVQA`` (config ``DocVQA``: ``questionId``, ``question``, ``image``,
``docId``, ``answers`` list, ``question_types``) and the original RRC JSON (``{"data": [...]}``
with ``image`` a relative path such as ``documents/xxx.png``). Test answers are hidden: such
rows load with no answers.
"""

from __future__ import annotations

from pathlib import Path

from evidra.core.types import Sample
from evidra.data.loaders._records import Record, as_str, literal_list, materialize_page, read_records
from evidra.data.loaders.loader import LOADERS, default_image_dir


def single_page_sample(rec: Record, out_dir: Path, dataset: str, extra_fields: tuple[str, ...]) -> Sample:
    """One question over one image, shared by DocVQA and InfographicVQA."""
    qid = as_str(rec.require("questionId"))
    image = rec.get("image") if rec.get("image") is not None else rec.require_any("image_local_name", "image")
    page = materialize_page(image, rec, page_id=f"{dataset}-{qid}", image_dir=out_dir)
    answers = literal_list(rec.get("answers") or [], rec, "answers")
    return Sample(
        id=qid,
        question=as_str(rec.require("question")),
        answers=tuple(as_str(a) for a in answers),
        pages=(page,),
        gold_pages=(page.id,),
        dataset=dataset,
        extras={k: rec.data[k] for k in extra_fields if rec.get(k) is not None},
    )


def load_docvqa(
    path: str | Path, *, image_dir: str | Path | None = None, limit: int | None = None, **_: object
) -> list[Sample]:
    out_dir = default_image_dir(path, image_dir)
    records = list(read_records(path, list_key="data"))[:limit]
    fields = ("docId", "question_types", "data_split", "ucsf_document_id", "ucsf_document_page_no")
    return [single_page_sample(r, out_dir, "docvqa", fields) for r in records]


LOADERS.add("docvqa", load_docvqa)
