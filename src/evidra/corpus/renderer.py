"""How ingest gets a document's pages: the ``Renderer`` protocol, and rendering in-process.

Ingest renders through ``evidra.corpus.render_pool.RenderPool``: each document is parsed in a
worker process under a memory cap and a deadline. ``InProcess`` renders in the calling process
with no such bounds; it is for documents the caller made itself (synthetic corpora) and for
measuring what the isolation costs (``benchmarks/pdf_workers.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator
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


def render_document(
    kind: DocKind,
    data: bytes,
    name: str,
    dpi: float,
    *,
    max_pixels: int,
    max_pages: int,
    max_doc_pixels: int | None,
    on_open: Callable[[int], None] | None = None,
) -> Iterator[RenderedPage]:
    """The pages of the document in ``data``: ``render_pdf`` at ``dpi``, or ``render_image``."""
    if kind == "pdf":
        return render_pdf(
            data,
            dpi,
            name,
            max_pixels=max_pixels,
            max_pages=max_pages,
            max_doc_pixels=max_doc_pixels,
            on_open=on_open,
        )
    return render_image(
        data, name, max_pixels=max_pixels, max_pages=max_pages, max_doc_pixels=max_doc_pixels, on_open=on_open
    )


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
        pages = render_document(
            kind,
            data,
            name,
            dpi,
            max_pixels=limits.max_pixels,
            max_pages=limits.max_pages,
            max_doc_pixels=limits.max_doc_pixels,
        )
        for page in pages:
            if cancel is not None and cancel.is_set():
                raise Cancelled(f"{name}: cancelled")
            yield page

    def title(self, data: bytes, name: str, limits: Limits, cancel: threading.Event | None = None) -> str:
        return pdf_title(data, name)
