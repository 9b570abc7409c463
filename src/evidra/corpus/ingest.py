"""Ingest a folder of PDFs and images into a ``PageStore``.

Run it as ``ingest("docs/", "store/")``. Every page gets the id
``make_page_id(content_hash(file bytes), page_number)``, so ingesting again is idempotent: a
file whose content hash is already stored is skipped without rendering (only its path is
recorded, which covers identical copies under other names), and nothing is duplicated.
Changing the DPI therefore does not re-render stored files: use a new store for that.

Which files are read is ``evidra.corpus.discovery``'s business: only files under ``root``, no
hidden ones, no links leaving it; files of other types are skipped and counted in the report.
One bad file never stops the run; the report lists it with its reason in one line.

Documents are parsed and rendered in worker processes (``evidra.corpus.render_pool``), each
under an address-space cap (``Limits.max_worker_bytes``) and a deadline per page
(``Limits.page_timeout_s``): a PDF that makes PDFium take all memory or time, or crash, costs
that file only. The parent's memory stays bounded too: pages come back and are written one at a
time, a page is capped at ``Limits.max_pixels`` (PDF pages are rendered at a lower dpi to fit,
images over it are refused before decoding), a file at ``Limits.max_pages`` pages or frames, at
``Limits.max_doc_pixels`` pixels over all its pages (checked from the page sizes before any
renders) and at ``Limits.max_file_bytes`` bytes (checked before the file is read, and the read
stops there).

A ``cancel`` event is checked between pages (and while a worker renders one): once it is set
the file being ingested is abandoned, nothing of it stored, it is listed as failed with the
reason "cancelled", and the files after it are not started.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator, Iterator, Mapping
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from evidra.core.errors import CorpusError, EvidraError, InvalidInputError
from evidra.core.types import content_hash, make_page_id
from evidra.corpus.discovery import Discovered, FailedFile, collect, unsupported_summary
from evidra.corpus.images import WordExtractor
from evidra.corpus.limits import DEFAULT_MAX_FILE_BYTES, MIB, Limits
from evidra.corpus.metadata import read_sidecar
from evidra.corpus.pdf import RenderedPage
from evidra.corpus.render_pool import shared_pool
from evidra.corpus.renderer import PDF_SUFFIXES, SUPPORTED_SUFFIXES, Cancelled, Renderer, kind_of
from evidra.corpus.store import PageStore

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "MIB",
    "PDF_SUFFIXES",
    "SUPPORTED_SUFFIXES",
    "FailedFile",
    "IngestCallback",
    "IngestProgress",
    "IngestReport",
    "Limits",
    "ingest",
]

logger = logging.getLogger(__name__)
CANCELLED = "cancelled"  # the reason of the file a cancel abandoned


@dataclass(frozen=True)
class IngestReport:
    """What one ``ingest`` call did."""

    added: tuple[str, ...]  # page ids rendered and stored by this call
    skipped: tuple[str, ...]  # page ids whose file content was already stored
    failed: tuple[FailedFile, ...]
    elapsed_s: float
    files_seen: int = 0  # documents found (supported suffixes)
    unsupported: tuple[str, ...] = ()  # files skipped for their type, relative to the root
    cancelled: bool = False
    not_started: tuple[str, ...] = ()  # files a cancel left untouched, relative to the root

    def summary(self) -> str:
        parts = [
            f"{len(self.added)} pages added, {len(self.skipped)} unchanged, "
            f"{len(self.failed)} files failed, {self.files_seen} files seen in {self.elapsed_s:.2f}s"
        ]
        if self.unsupported:
            parts.append(unsupported_summary(self.unsupported))
        if self.cancelled:
            parts.append(f"cancelled, {len(self.not_started)} files not started")
        return "; ".join(parts)


@dataclass(frozen=True)
class IngestProgress:
    """Where an ``ingest`` call stands; reported after every page stored and every file done."""

    files_done: int
    files_total: int
    pages: int  # pages stored by this call or found already stored, so far


IngestCallback = Callable[[IngestProgress], None]


@dataclass
class _Tally:
    files_total: int
    callback: IngestCallback | None
    files_done: int = 0
    pages: int = 0

    def page(self) -> None:
        self.pages += 1
        self._report()

    def file_done(self, unchanged_pages: int) -> None:
        self.files_done += 1
        self.pages += unchanged_pages
        self._report()

    def _report(self) -> None:
        if self.callback is not None:
            self.callback(IngestProgress(self.files_done, self.files_total, self.pages))


@dataclass(frozen=True)
class _Run:
    """What every file of one ``ingest`` call is ingested with."""

    store: PageStore
    dpi: float
    ocr: WordExtractor | None
    limits: Limits
    meta: Mapping[str, str]
    renderer: Renderer
    cancel: threading.Event | None

    @property
    def cancelled(self) -> bool:
        return self.cancel is not None and self.cancel.is_set()

    def check_cancel(self) -> None:
        if self.cancelled:
            raise Cancelled(CANCELLED)


@dataclass
class _Outcome:
    added: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[FailedFile] = field(default_factory=list)
    not_started: list[str] | None = None  # set when a cancel stopped the run

    def report(self, elapsed_s: float, found: Discovered) -> IngestReport:
        return IngestReport(
            added=tuple(self.added),
            skipped=tuple(self.skipped),
            failed=tuple(self.failed),
            elapsed_s=elapsed_s,
            files_seen=len(found.files),
            unsupported=found.unsupported,
            cancelled=self.not_started is not None,
            not_started=tuple(self.not_started or ()),
        )


def _ticking(
    pages: Iterator[tuple[str, RenderedPage]], tick: Callable[[], None], run: _Run
) -> Iterator[tuple[str, RenderedPage]]:
    for page in pages:
        yield page
        tick()  # the consumer asked for the next page: this one is stored
        run.check_cancel()


def _over_size_cap(source: str, size: int, cap: int) -> CorpusError:
    """The one-line refusal of a file over ``cap`` bytes, with the option value that admits it."""
    return CorpusError(
        f"{source} is {size / MIB:.1f} MiB ({size} bytes), over the cap of {cap / MIB:g} MiB per file; "
        f"raise the cap (--max-file-mb {-(-size // MIB)}, or Limits(max_file_bytes=...))"
    )


def _read_capped(path: Path, source: str, cap: int) -> bytes:
    """The bytes of ``path``, refused before reading when its size is over ``cap``.

    The size is checked first (a sparse or huge file costs nothing), and the read stops one
    byte past the cap, so a file that grows after the check cannot make it read more.
    """
    size = path.stat().st_size
    if size > cap:
        raise _over_size_cap(source, size, cap)
    with path.open("rb") as f:
        data = f.read(size + 1)  # not f.read(cap + 1): that allocates the whole cap up front
        if len(data) > size:  # the file grew since stat: read on, up to one byte past the cap
            data += f.read(cap + 1 - len(data))
    if len(data) > cap:
        raise _over_size_cap(source, max(len(data), path.stat().st_size), cap)
    return data


def _with_ocr(page: RenderedPage, ocr: WordExtractor | None) -> RenderedPage:
    if ocr is None or page.words:
        return page
    return RenderedPage(page.page_number, page.image, tuple(ocr(page.image)), page.dpi)


def _render(
    path: Path,
    data: bytes,
    source: str,
    dpi: float,
    limits: Limits,
    renderer: Renderer,
    cancel: threading.Event | None,
) -> Generator[RenderedPage, None, None]:
    return renderer.render(kind_of(path), data, source, dpi, limits, cancel)


def _ingest_file(run: _Run, path: Path, source: str, on_page: Callable[[], None]) -> tuple[list[str], bool]:
    """Store one file; returns its page ids and whether they were newly added. ``on_page`` is
    called after each page rendered and stored. ``run.meta`` (then the file's sidecar) is added
    to its document's metadata."""
    data = _read_capped(path, source, run.limits.max_file_bytes)
    file_hash = content_hash(data)
    meta = {**run.meta, **read_sidecar(path)}
    store = run.store
    existing = store.page_ids_for_hash(file_hash)
    if existing:
        if store.hash_of_source(source) != file_hash:
            store.record_source(source, file_hash)
        if meta:
            store.set_document(file_hash, meta=meta)
        return existing, False
    is_pdf = kind_of(path) == "pdf"
    title = run.renderer.title(data, source, run.limits, run.cancel) if is_pdf else ""
    rendered = _render(path, data, source, run.dpi, run.limits, run.renderer, run.cancel)
    with closing(rendered):  # a file abandoned midway frees its worker at once
        pages = _ticking(
            ((make_page_id(file_hash, r.page_number), _with_ocr(r, run.ocr)) for r in rendered),
            on_page,
            run,
        )
        ids = store.write_file(source, file_hash, pages, run.dpi if is_pdf else None)
    store.set_document(file_hash, title=title, meta=meta)
    return ids, True


def _reason(exc: Exception) -> str:
    if isinstance(exc, MemoryError):
        return "ran out of memory; lower --max-pixels or --dpi, or ingest it on a larger machine"
    return str(exc) if isinstance(exc, EvidraError) else f"{type(exc).__name__}: {exc}"


def _ingest_files(run: _Run, base: Path, files: tuple[Path, ...], tally: _Tally, outcome: _Outcome) -> None:
    """Ingest ``files`` in order into ``outcome``; a bad file is skipped, a cancel stops the run."""
    sources = [path.relative_to(base).as_posix() for path in files]
    for index, (path, source) in enumerate(zip(files, sources, strict=True)):
        if run.cancelled:
            outcome.not_started = sources[index:]
            return
        try:
            ids, new = _ingest_file(run, path, source, tally.page)
        except Cancelled:
            outcome.failed.append(FailedFile(source, CANCELLED))
            outcome.not_started = sources[index + 1 :]
            logger.info("ingest cancelled during %s; nothing of it stored", source)
            tally.file_done(0)
            return
        except Exception as exc:  # any bad file (MemoryError included) is skipped, never fatal
            reason = _reason(exc)
            logger.warning("skipping %s: %s", source, reason)
            outcome.failed.append(FailedFile(source, reason))
            tally.file_done(0)
            continue
        (outcome.added if new else outcome.skipped).extend(ids)
        tally.file_done(0 if new else len(ids))


def _open_store(store: PageStore | str | Path) -> tuple[PageStore, bool]:
    """The store, and whether this call opened it (and so closes it)."""
    if isinstance(store, PageStore):
        page_store, owned = store, False
    else:
        page_store, owned = PageStore.create(store), True
    try:
        page_store.check_names()  # a damaged store stops the ingest before any file is touched
    except CorpusError:
        if owned:
            page_store.close()
        raise
    page_store.clean_staging()
    return page_store, owned


def ingest(
    root: str | Path,
    store: PageStore | str | Path,
    *,
    dpi: float = 150,
    recursive: bool = True,
    ocr: WordExtractor | None = None,
    limits: Limits | None = None,
    progress: IngestCallback | None = None,
    meta: Mapping[str, str] | None = None,
    cancel: threading.Event | None = None,
    renderer: Renderer | None = None,
) -> IngestReport:
    """Ingest every PDF and image under ``root`` into ``store`` (a store or a path to create one).

    ``ocr``, if given, supplies words for pages without a text layer (images, scanned PDFs).
    ``root`` may also be a single file. Raises ``InvalidInputError`` if ``root`` does not exist;
    per-file problems (unreadable, over a cap of ``limits``, too much memory or time in its
    worker) are logged as warnings and listed in ``IngestReport.failed``, and the run goes on
    with the next file. ``meta`` is user metadata for every file's document; a file's sidecar
    ``<file>.meta.json`` adds to it (``evidra.corpus.metadata``). ``cancel``, once set, abandons
    the file being ingested and starts no other (``IngestReport.cancelled``); ``progress`` is
    called after every page stored and every file done, in the calling thread. ``renderer``
    defaults to the process's worker pool for ``limits.max_worker_bytes`` (``shared_pool``);
    ``InProcess()`` renders without isolation, for documents the caller made itself.
    """
    limits = limits or Limits()
    start = time.perf_counter()
    given = Path(root).expanduser()
    if not given.exists():
        raise InvalidInputError(
            f"ingest root {str(root)!r} does not exist; pass a folder or file of documents"
        )
    if dpi <= 0:
        raise InvalidInputError(f"dpi must be positive, got {dpi}")
    page_store, owned = _open_store(store)
    real = given.resolve()
    base, found = collect(real, recursive, page_store.root)
    for item in found.refused:
        logger.warning("skipping %s: %s", item.path, item.reason)
    if found.unsupported:
        logger.debug("%s: %s", real, unsupported_summary(found.unsupported))  # the summary says it
    run = _Run(
        page_store, dpi, ocr, limits, meta or {}, renderer or shared_pool(limits.max_worker_bytes), cancel
    )
    outcome = _Outcome(failed=list(found.refused))
    try:
        _ingest_files(run, base, found.files, _Tally(len(found.files), progress), outcome)
    finally:
        if owned:
            page_store.close()
    report = outcome.report(time.perf_counter() - start, found)
    logger.debug("ingest %s: %s", real, report.summary())  # the caller holds the report
    return report
