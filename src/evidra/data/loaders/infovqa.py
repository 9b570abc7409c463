"""InfographicVQA (its published record format), scored with ANLS.

``lmms-lab/DocVQA`` config ``InfographicVQA``: ``questionId``, ``question``, ``answers`` list,
``answer_type`` list, ``image``, ``operation/reasoning``, ``ocr``, ``data_split``; the original
JSON names the image ``image_local_name``.
"""

from __future__ import annotations

from pathlib import Path

from evidra.core.types import Sample
from evidra.data.loaders._records import read_records
from evidra.data.loaders.docvqa import single_page_sample
from evidra.data.loaders.loader import LOADERS, default_image_dir


def load_infovqa(
    path: str | Path, *, image_dir: str | Path | None = None, limit: int | None = None, **_: object
) -> list[Sample]:
    out_dir = default_image_dir(path, image_dir)
    records = list(read_records(path, list_key="data"))[:limit]
    fields = ("answer_type", "operation/reasoning", "data_split", "image_url")
    return [single_page_sample(r, out_dir, "infovqa", fields) for r in records]


LOADERS.add("infovqa", load_infovqa)
