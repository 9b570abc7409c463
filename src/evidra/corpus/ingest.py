"""Ingest a folder of PDFs and images into a ``PageStore``.

Run it as ``ingest("docs/", "store/")``. Every page gets the id
``make_page_id(content_hash(file bytes), page_number)``, so ingesting again is idempotent: a
file whose content hash is already stored is skipped without rendering (only its path is
recorded, which covers identical copies under other names), and nothing is duplicated.
Changing the DPI therefore does not re-render stored files: use a new store for that.

Only files under ``root`` are read: a symlink resolving outside it is refused with a warning,
as is anything unreadable; hidden files and folders (names starting with ".") and the store's
own directory are not scanned. One bad file never stops the run; the report lists it.

Memory stays bounded whatever the input: pages are rendered and written one at a time, a page
is capped at ``Limits.max_pixels`` (PDF pages are rendered at a lower dpi to fit, images over it
are refused before decoding), a file at ``Limits.max_pages`` pages or frames and at
``Limits.max_file_bytes`` bytes (checked before the file is read, and the read stops there).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from evidra.corpus.images import IMAGE_SUFFIXES, WordExtractor, render_image
from evidra.corpus.metadata import read_sidecar
from evidra.corpus.pdf import DEFAULT_MAX_PAGES, DEFAULT_MAX_PIXELS, RenderedPage, pdf_title, render_pdf
from evidra.corpus.store import PageStore
from evidra.errors import CorpusError, EvidraError, InvalidInputError
from evidra.types import content_hash, make_page_id

logger = logging.getLogger(__name__)

PDF_SUFFIXES = frozenset({".pdf"})
MIB = 1 << 20
DEFAULT_MAX_FILE_BYTES = 512 * MIB  # a 10,000-page scanned PDF at 50 KB a page fits
SUPPORTED_SUFFIXES = PDF_SUFFIXES | IMAGE_SUFFIXES


@dataclass(frozen=True)
class FailedFile:
    """A file that was not ingested, and why."""

    path: str  # relative to the ingest root
    reason: str


@dataclass(frozen=True)
class IngestReport:
    """What one ``ingest`` call did."""

    added: tuple[str, ...]  # page ids rendered and stored by this call
    skipped: tuple[str, ...]  # page ids whose file content was already stored
    failed: tuple[FailedFile, ...]
    elapsed_s: float
    files_seen: int = 0

    def summary(self) -> str:
        return (
            f"{len(self.added)} pages added, {len(self.skipped)} unchanged, "
            f"{len(self.failed)} files failed, {self.files_seen} files seen in {self.elapsed_s:.2f}s"
        )


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


def _ticking(
    pages: Iterator[tuple[str, RenderedPage]], tick: Callable[[], None]
) -> Iterator[tuple[str, RenderedPage]]:
    for page in pages:
        yield page
        tick()  # the consumer asked for the next page: this one is stored


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def discover(
    root: Path, *, recursive: bool = True, exclude: Path | None = None
) -> tuple[list[Path], list[FailedFile]]:
    """Supported files under ``root`` (resolved), sorted by relative path, plus refused ones.

    Symlinks are followed only while their targets stay inside ``root``; each real directory
    is visited once, so link cycles terminate.
    """
    files: list[Path] = []
    refused: list[FailedFile] = []
    seen_dirs: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        real = here.resolve()
        rel_dir = here.relative_to(root)
        if real in seen_dirs or not _inside(real, root) or (exclude is not None and _inside(real, exclude)):
            if not _inside(real, root):
                refused.append(FailedFile(rel_dir.as_posix(), f"resolves to {real}, outside the ingest root"))
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        for name in sorted(filenames):
            path = here / name
            if name.startswith(".") or path.suffix.lower() not in SUPPORTED_SUFFIXES:
                continue
            target = path.resolve()
            if not _inside(target, root):
                refused.append(
                    FailedFile((rel_dir / name).as_posix(), f"resolves to {target}, outside the ingest root")
                )
            elif target.is_file():
                files.append(path)
            elif not target.exists():
                refused.append(FailedFile((rel_dir / name).as_posix(), "is a broken symbolic link"))
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    return files, refused


def _collect(real: Path, recursive: bool, store_root: Path) -> tuple[Path, list[Path], list[FailedFile]]:
    """The base folder sources are relative to, the files to ingest, and refused paths."""
    if real.is_file():
        return real.parent, [real], []
    files, refused = discover(real, recursive=recursive, exclude=store_root)
    return real, files, refused


@dataclass(frozen=True)
class Limits:
    """Caps on what one file may make ingest render; a file over a cap is skipped and named."""

    max_pixels: int = DEFAULT_MAX_PIXELS  # per page; PDF pages are rendered at a lower dpi to fit
    max_pages: int = DEFAULT_MAX_PAGES  # per file (PDF pages or image frames)
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES  # per file, before it is read (--max-file-mb in MiB)

    def __post_init__(self) -> None:
        if self.max_pixels < 1 or self.max_pages < 1 or self.max_file_bytes < 1:
            raise InvalidInputError(
                f"max_pixels, max_pages and max_file_bytes must be positive, got {self.max_pixels}, "
                f"{self.max_pages} and {self.max_file_bytes}"
            )


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


def _render(path: Path, data: bytes, source: str, dpi: float, limits: Limits) -> Iterator[RenderedPage]:
    if path.suffix.lower() in PDF_SUFFIXES:
        return render_pdf(data, dpi, source, max_pixels=limits.max_pixels, max_pages=limits.max_pages)
    return render_image(data, source, max_pixels=limits.max_pixels, max_pages=limits.max_pages)


def _ingest_file(
    store: PageStore,
    path: Path,
    source: str,
    dpi: float,
    ocr: WordExtractor | None,
    limits: Limits,
    on_page: Callable[[], None],
    meta: Mapping[str, str],
) -> tuple[list[str], bool]:
    """Store one file; returns its page ids and whether they were newly added. ``on_page`` is
    called after each page rendered and stored. ``meta`` (then the file's sidecar) is added to
    its document's metadata."""
    data = _read_capped(path, source, limits.max_file_bytes)
    file_hash = content_hash(data)
    meta = {**meta, **read_sidecar(path)}
    existing = store.page_ids_for_hash(file_hash)
    if existing:
        if store.hash_of_source(source) != file_hash:
            store.record_source(source, file_hash)
        if meta:
            store.set_document(file_hash, meta=meta)
        return existing, False
    pages = _ticking(
        (
            (make_page_id(file_hash, r.page_number), _with_ocr(r, ocr))
            for r in _render(path, data, source, dpi, limits)
        ),
        on_page,
    )
    is_pdf = path.suffix.lower() in PDF_SUFFIXES
    ids = store.write_file(source, file_hash, pages, dpi if is_pdf else None)
    store.set_document(file_hash, title=pdf_title(data, source) if is_pdf else "", meta=meta)
    return ids, True


def _reason(exc: Exception) -> str:
    if isinstance(exc, MemoryError):
        return "ran out of memory; lower --max-pixels or --dpi, or ingest it on a larger machine"
    return str(exc) if isinstance(exc, EvidraError) else f"{type(exc).__name__}: {exc}"


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
) -> IngestReport:
    """Ingest every PDF and image under ``root`` into ``store`` (a store or a path to create one).

    ``ocr``, if given, supplies words for pages without a text layer (images, scanned PDFs).
    ``root`` may also be a single file. Raises ``InvalidInputError`` if ``root`` does not exist;
    per-file problems (unreadable, over a cap of ``limits``, out of memory) are logged as
    warnings and listed in ``IngestReport.failed``, and the run goes on with the next file.
    ``meta`` is user metadata for every file's document; a file's sidecar ``<file>.meta.json``
    adds to it (``evidra.corpus.metadata``).
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
    owned = not isinstance(store, PageStore)
    page_store = PageStore.create(store) if not isinstance(store, PageStore) else store
    try:
        page_store.check_names()  # a damaged store stops the ingest before any file is touched
    except CorpusError:
        if owned:
            page_store.close()
        raise
    page_store.clean_staging()
    real = given.resolve()
    base, files, refused = _collect(real, recursive, page_store.root)
    for item in refused:
        logger.warning("skipping %s: %s", item.path, item.reason)
    added: list[str] = []
    skipped: list[str] = []
    failed = list(refused)
    tally = _Tally(len(files), progress)
    try:
        for path in files:
            source = path.relative_to(base).as_posix()
            try:
                ids, new = _ingest_file(page_store, path, source, dpi, ocr, limits, tally.page, meta or {})
            except Exception as exc:  # any bad file (MemoryError included) is skipped, never fatal
                reason = _reason(exc)
                logger.warning("skipping %s: %s", source, reason)
                failed.append(FailedFile(source, reason))
                tally.file_done(0)
                continue
            (added if new else skipped).extend(ids)
            tally.file_done(0 if new else len(ids))
    finally:
        if owned:
            page_store.close()
    report = IngestReport(
        tuple(added), tuple(skipped), tuple(failed), time.perf_counter() - start, len(files)
    )
    logger.debug("ingest %s: %s", real, report.summary())  # the caller holds the report
    return report
