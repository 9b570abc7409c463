"""Documents in, pages out: ingest PDFs and images into a page store with word boxes.

>>> from evidra.corpus import PageStore, ingest          # doctest: +SKIP
>>> report = ingest("docs/", "store/", dpi=150)          # doctest: +SKIP
>>> pages = PageStore.open("store/").pages()             # doctest: +SKIP
"""

from __future__ import annotations

from evidra.corpus.images import IMAGE_SUFFIXES, WordExtractor
from evidra.corpus.ingest import (
    SUPPORTED_SUFFIXES,
    FailedFile,
    IngestProgress,
    IngestReport,
    Limits,
    ingest,
)
from evidra.corpus.pdf import RenderedPage, render_pdf
from evidra.corpus.render_pool import RenderPool, shared_pool
from evidra.corpus.renderer import Cancelled, InProcess, Renderer
from evidra.corpus.store import PageStore

__all__ = [
    "IMAGE_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "Cancelled",
    "FailedFile",
    "InProcess",
    "IngestProgress",
    "IngestReport",
    "Limits",
    "PageStore",
    "RenderPool",
    "RenderedPage",
    "Renderer",
    "WordExtractor",
    "ingest",
    "render_pdf",
    "shared_pool",
]
