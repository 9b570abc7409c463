"""PDF documents of a benchmark as pages, through the evidra page store.

ViDoSeek and MMLongBench-Doc ship PDFs; they are ingested once into a page store (rendering
and text layer via ``evidra.corpus``) and each question gets its document's pages in order.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Sample
from evidra.corpus import PageStore, ingest
from evidra.data.loaders._records import Record, read_records
from evidra.data.loaders.loader import Loader

SampleOf = Callable[[Record, dict[str, list[Page]]], Sample]  # a record and the documents' pages


def document_pages(documents: str | Path, store: str | Path, *, dpi: float = 144) -> dict[str, list[Page]]:
    """``{file name: pages in page order}`` for every PDF under ``documents``."""
    docs = Path(documents)
    if not docs.is_dir():
        raise InvalidInputError(f"documents folder {str(documents)!r} does not exist; pass documents=")
    ingest(docs, store, dpi=dpi)
    by_source: dict[str, list[Page]] = {}
    with PageStore.open(store) as ps:
        for page in ps.pages(with_words=False):
            by_source.setdefault(Path(page.source).name, []).append(page)
    return {k: sorted(v, key=lambda p: p.page_number) for k, v in by_source.items()}


def documents_loader(sample: SampleOf, *, list_key: str | None = None) -> Loader:
    """The loader of a benchmark of questions over PDFs: it ingests the PDFs under ``documents``
    into the page store ``store`` at ``dpi``, then makes each record of ``path`` (under
    ``list_key`` in a JSON file, up to ``limit``) into a ``Sample`` with ``sample``."""

    def load(
        path: str | Path,
        *,
        documents: str | Path,
        store: str | Path,
        dpi: float = 144,
        limit: int | None = None,
        **_: object,
    ) -> list[Sample]:
        docs = document_pages(documents, store, dpi=dpi)
        return [sample(r, docs) for r in list(read_records(path, list_key=list_key))[:limit]]

    return load
