"""The caps one ingested file must fit under: pages, pixels, bytes, worker memory and time.

A file over a cap is skipped and named in one line that says which cap and which option value
would admit it; the run goes on with the next file. The first three caps are checked by evidra
itself; the worker caps bound what PDFium and Pillow (C code evidra cannot bound from inside)
may take while they parse and render one file (``evidra.corpus.render_pool``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.corpus.pdf import DEFAULT_MAX_PAGES, DEFAULT_MAX_PIXELS

MIB = 1 << 20
DEFAULT_MAX_FILE_BYTES = 512 * MIB  # a 10,000-page scanned PDF at 50 KB a page fits
# 10,000 Letter pages at 150 dpi (the page cap's worth) are 21 Gpx; a document over 25 Gpx
# would take hours and terabytes of RGB to render and store
DEFAULT_MAX_DOC_PIXELS = 25_000_000_000
# a worker holds the file (up to 512 MiB), PDFium's parse and one page of up to 50 Mpx as BGRA,
# RGB and bytes (~500 MB): 2 GiB leaves room, and a bomb is stopped at 2 GiB instead of 4+
DEFAULT_MAX_WORKER_BYTES = 2048 * MIB
MIN_WORKER_BYTES = 128 * MIB  # a worker's interpreter with PDFium and Pillow maps ~50 MiB
# a dense vector map renders in seconds; a page still busy after a minute is hostile or broken
DEFAULT_PAGE_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Limits:
    """Caps on what one file may make ingest render; a file over a cap is skipped and named.

    ``max_worker_bytes`` is the address-space cap (``RLIMIT_AS``) of the worker process that
    parses and renders a document; ``page_timeout_s`` is how long that worker may take to open
    the document or to render one page before it is killed.
    """

    max_pixels: int = DEFAULT_MAX_PIXELS  # per page; PDF pages are rendered at a lower dpi to fit
    max_pages: int = DEFAULT_MAX_PAGES  # per file (PDF pages or image frames)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES  # per file, before it is read (--max-file-mb in MiB)
    max_doc_pixels: int = DEFAULT_MAX_DOC_PIXELS  # per file, all pages together (--max-doc-pixels)
    max_worker_bytes: int = DEFAULT_MAX_WORKER_BYTES  # per worker process (--max-worker-mb in MiB)
    page_timeout_s: float = DEFAULT_PAGE_TIMEOUT_S  # per page, and to open a file (--page-timeout)

    def __post_init__(self) -> None:
        counts = {
            "max_pixels": self.max_pixels,
            "max_pages": self.max_pages,
            "max_file_bytes": self.max_file_bytes,
            "max_doc_pixels": self.max_doc_pixels,
        }
        for name, value in counts.items():
            if value < 1:
                raise InvalidInputError(f"Limits.{name} must be positive, got {value}")
        if self.max_worker_bytes < MIN_WORKER_BYTES:
            raise InvalidInputError(
                f"max_worker_bytes must be at least {MIN_WORKER_BYTES // MIB} MiB (a worker's Python and "
                f"PDFium need that much to start), got {self.max_worker_bytes / MIB:g} MiB"
            )
        if not (math.isfinite(self.page_timeout_s) and self.page_timeout_s > 0):
            raise InvalidInputError(f"page_timeout_s must be a positive number, got {self.page_timeout_s}")
