"""How ingest gets a document's pages: the ``Renderer`` protocol, and rendering in-process.

Ingest renders through ``evidra.corpus.render_pool.RenderPool``: each document is parsed in a
worker process under a memory cap and a deadline. ``InProcess`` renders in the calling process
with no such bounds; it is for documents the caller made itself (synthetic corpora) and for
measuring what the isolation costs (``benchmarks/pdf_workers.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Generator
from pathlib import Path
from typing import Literal, Protocol

from evidra.core.errors import EvidraError
from evidra.corpus.images import IMAGE_SUFFIXES, render_image
from evidra.corpus.limits import Limits
from evidra.corpus.pdf import RenderedPage, pdf_title, render_pdf

DocKind = Literal["pdf", "image"]
PDF_SUFFIXES = frozenset({".pdf"})
SUPPORTED_SUFFIXES = PDF_SUFFIXES | IMAGE_SUFFIXES


class Cancelled(EvidraError):
    """The caller's cancel event was set while a document was being rendered."""


def kind_of(path: Path) -> DocKind:
    """``"pdf"`` for a ``.pdf`` file, else ``"image"`` (the suffixes ingest reads are known)."""
    return "pdf" if path.suffix.lower() in PDF_SUFFIXES else "image"


class Renderer(Protocol):
    """Turns a document's bytes into its pages, one at a time, under ``limits``.

    Both methods raise ``CorpusError`` naming ``name`` when the document is unreadable or
    breaks a cap, and ``Cancelled`` once ``cancel`` is set (checked at least between pages).
    """

    def render(
        self,
        kind: DocKind,
        data: bytes,
        name: str,
        dpi: float,
        limits: Limits,
        cancel: threading.Event | None = None,
    ) -> Generator[RenderedPage, None, None]: ...

    def title(self, data: bytes, name: str, limits: Limits, cancel: threading.Event | None = None) -> str: ...


class InProcess:
    """Renders in the calling process: no memory cap, no deadline. Only for trusted documents."""

    def render(
        self,
        kind: DocKind,
        data: bytes,
        name: str,
        dpi: float,
        limits: Limits,
        cancel: threading.Event | None = None,
    ) -> Generator[RenderedPage, None, None]:
        caps = (limits.max_pixels, limits.max_pages, limits.max_doc_pixels)
        if kind == "pdf":
            pages = render_pdf(data, dpi, name, max_pixels=caps[0], max_pages=caps[1], max_doc_pixels=caps[2])
        else:
            pages = render_image(data, name, max_pixels=caps[0], max_pages=caps[1], max_doc_pixels=caps[2])
        for page in pages:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"{name}: cancelled")
            yield page

    def title(self, data: bytes, name: str, limits: Limits, cancel: threading.Event | None = None) -> str:
        return pdf_title(data, name)
