"""A page store: one PNG per page plus an SQLite file with page metadata and word boxes.

Layout of a store directory::

    pages/{page_id}.png     page images (PDF pages rendered at the ingest DPI; images as RGB)
    store.sqlite            meta(key, value), pages(...), words(...), files(source, file_hash),
                            documents(file_hash, title, meta): title and user metadata per document
                            (added without a schema change: a store written before it gains the
                            empty table when opened, and its documents are titled by file name)

``meta`` also lists the retrieval indexes built over the store (``register_index``; ``evidra
index build --store`` registers its output), so ``evidra ask --store`` finds one without ``--index``.

Page ids come from the source file's content hash (``make_page_id``), so the same bytes always
give the same ids. The ``files`` table maps every ingested path to its content hash: an
identical copy under another name is recorded there as a second source of the same pages,
while pages, words and PNGs exist once. ``Page.source`` is the first path (in ingest order,
which is sorted) that held the content; ``sources_of(page_id)`` lists them all.

Writes are per file and all-or-nothing: PNGs go to staging names (``.{page_id}.{pid}.*.tmp``)
one page at a time, are renamed once every page rendered, and the SQLite rows are committed
only after the images exist. Staging files of a killed ingest are removed by the next one
(``clean_staging``).
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import shlex
import sqlite3
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.core.types import Box, Page, Word
from evidra.corpus.metadata import PageMeta, Where
from evidra.safeio.confined import inside
from evidra.safeio.staging import pid_in_name, process_alive

if TYPE_CHECKING:
    from evidra.corpus.pdf import RenderedPage

logger = logging.getLogger(__name__)

SCHEMA_VERSION = "1"
DB_NAME = "store.sqlite"
PAGES_DIR = "pages"
STAGING_SUFFIX = ".tmp"
PNG_COMPRESS_LEVEL = 3  # level 6 (PIL's default) doubles save time for ~5% smaller files

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pages (
    id TEXT PRIMARY KEY, image_path TEXT NOT NULL, width INTEGER NOT NULL, height INTEGER NOT NULL,
    source TEXT NOT NULL, page_number INTEGER NOT NULL, dpi REAL, file_hash TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS pages_hash ON pages(file_hash);
CREATE TABLE IF NOT EXISTS words (
    page_id TEXT NOT NULL REFERENCES pages(id), idx INTEGER NOT NULL, text TEXT NOT NULL,
    x1 REAL NOT NULL, y1 REAL NOT NULL, x2 REAL NOT NULL, y2 REAL NOT NULL, PRIMARY KEY (page_id, idx));
CREATE TABLE IF NOT EXISTS files (source TEXT PRIMARY KEY, file_hash TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS documents (
    file_hash TEXT PRIMARY KEY, title TEXT NOT NULL DEFAULT '', meta TEXT NOT NULL DEFAULT '{}');
"""


class PageStore:
    """A directory of page images with their metadata; see the module docstring for the layout."""

    def __init__(self, root: Path, conn: sqlite3.Connection) -> None:
        self.root = root
        self._conn = conn

    # -- opening -----------------------------------------------------------------------------
    @classmethod
    def open(cls, path: str | Path) -> PageStore:
        """Open an existing store; raises ``CorpusError`` if ``path`` holds none."""
        root = Path(path).expanduser().resolve()
        if not (root / DB_NAME).is_file():
            raise CorpusError(
                f"no page store at {root} (missing {DB_NAME}); create one with `evidra ingest "
                f"<documents> --store {shlex.quote(str(path))}` or PageStore.create({str(path)!r})"
            )
        if (root / DB_NAME).stat().st_size == 0:  # sqlite would take an empty file for a new database
            raise CorpusError(
                f"{root / DB_NAME} is empty (0 bytes), so the store lost its page list; ingest the "
                "documents again into a new store"
            )
        return cls._connect(root)

    @classmethod
    def create(cls, path: str | Path) -> PageStore:
        """Open the store at ``path``, creating an empty one if there is none yet."""
        root = Path(path).expanduser().resolve()
        if root.exists() and not root.is_dir():
            raise CorpusError(f"cannot create a page store at {root}: it exists and is not a directory")
        (root / PAGES_DIR).mkdir(parents=True, exist_ok=True)
        return cls._connect(root)

    @classmethod
    def _connect(cls, root: Path) -> PageStore:
        conn = sqlite3.connect(root / DB_NAME)
        try:
            conn.executescript(_SCHEMA)
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
                conn.commit()
            elif row[0] != SCHEMA_VERSION:
                raise CorpusError(
                    f"page store {root} has schema version {row[0]}, this evidra reads {SCHEMA_VERSION}; "
                    "ingest the documents again into a new store"
                )
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise CorpusError(f"{root / DB_NAME} is not a readable page store database ({exc})") from exc
        except CorpusError:
            conn.close()
            raise
        return cls(root, conn)

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> PageStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- reading -----------------------------------------------------------------------------
    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM pages").fetchone()[0])

    def __contains__(self, page_id: object) -> bool:
        return self._conn.execute("SELECT 1 FROM pages WHERE id = ?", (page_id,)).fetchone() is not None

    def page_ids(self) -> list[str]:
        """All page ids, ordered by (source, page_number)."""
        rows = self._conn.execute("SELECT id FROM pages ORDER BY source, page_number, id")
        return [r[0] for r in rows]

    def sources(self) -> list[str]:
        """Every ingested source path (relative to its ingest root), including identical copies."""
        return [r[0] for r in self._conn.execute("SELECT source FROM files ORDER BY source")]

    def sources_of(self, page_id: str) -> list[str]:
        """All source paths whose content produced ``page_id``."""
        page = self.get(page_id, with_words=False)
        file_hash = self._hash_of(page_id)
        rows = self._conn.execute(
            "SELECT source FROM files WHERE file_hash = ? ORDER BY source", (file_hash,)
        )
        return [r[0] for r in rows] or [page.source]

    def pages(self, *, with_words: bool = True) -> list[Page]:
        """All pages ordered by (source, page_number); ``with_words=False`` skips the text layer."""
        rows = self._conn.execute(f"{self._SELECT} ORDER BY source, page_number, id").fetchall()
        words = self._all_words() if with_words else {}
        return [self._page(row, words.get(row[0], ())) for row in rows]

    def get(self, page_id: str, *, with_words: bool = True) -> Page:
        """The page with id ``page_id``; ``InvalidInputError`` with close matches if unknown."""
        row = self._conn.execute(f"{self._SELECT} WHERE id = ?", (page_id,)).fetchone()
        if row is None:
            close = difflib.get_close_matches(page_id, self.page_ids(), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            raise InvalidInputError(
                f"unknown page id {page_id!r} in page store {self.root} ({len(self)} pages){hint} "
                "List ids with PageStore.page_ids()."
            )
        return self._page(row, self._words(page_id) if with_words else ())

    _SELECT = "SELECT id, image_path, width, height, source, page_number, dpi FROM pages"

    def _page(self, row: tuple[object, ...], words: tuple[Word, ...]) -> Page:
        pid, rel, width, height, source, number, dpi = row
        return Page(
            id=str(pid),
            image_path=str(
                inside(self.root, str(rel), f"page {pid!r} in {self.root / DB_NAME}", CorpusError)
            ),
            width=int(width),  # type: ignore[call-overload]
            height=int(height),  # type: ignore[call-overload]
            source=str(source),
            page_number=int(number),  # type: ignore[call-overload]
            words=words,
            dpi=None if dpi is None else float(dpi),  # type: ignore[arg-type]
        )

    def _words(self, page_id: str) -> tuple[Word, ...]:
        rows = self._conn.execute(
            "SELECT text, x1, y1, x2, y2 FROM words WHERE page_id = ? ORDER BY idx", (page_id,)
        )
        return tuple(Word(t, Box(x1, y1, x2, y2)) for t, x1, y1, x2, y2 in rows)

    def _all_words(self) -> dict[str, tuple[Word, ...]]:
        out: dict[str, list[Word]] = {}
        for pid, t, x1, y1, x2, y2 in self._conn.execute(
            "SELECT page_id, text, x1, y1, x2, y2 FROM words ORDER BY page_id, idx"
        ):
            out.setdefault(pid, []).append(Word(t, Box(x1, y1, x2, y2)))
        return {k: tuple(v) for k, v in out.items()}

    def _hash_of(self, page_id: str) -> str:
        return str(self._conn.execute("SELECT file_hash FROM pages WHERE id = ?", (page_id,)).fetchone()[0])

    # -- documents: titles, user metadata, filters ---------------------------------------------
    def page_meta(self) -> dict[str, PageMeta]:
        """Every page's document, file, number, title and user metadata, by page id."""
        docs = {
            h: (t, _meta(m)) for h, t, m in self._conn.execute("SELECT file_hash, title, meta FROM documents")
        }
        out = {}
        for pid, source, number, file_hash in self._conn.execute(
            "SELECT id, source, page_number, file_hash FROM pages ORDER BY source, page_number, id"
        ):
            title, meta = docs.get(file_hash, ("", {}))
            stem = str(source).replace("\\", "/").rsplit("/", 1)[-1].rsplit(".", 1)[0]
            out[pid] = PageMeta(pid, file_hash, source, int(number), title or stem, meta)
        return out

    def page_ids_where(self, where: Where) -> list[str]:
        """The ids of the pages ``where`` accepts, in page order."""
        return [pid for pid, meta in self.page_meta().items() if where.matches(meta)]

    def set_document(
        self, file_hash: str, *, title: str | None = None, meta: dict[str, str] | None = None
    ) -> None:
        """Record a document's title (None: keep it) and add ``meta`` to its user metadata."""
        row = self._conn.execute(
            "SELECT title, meta FROM documents WHERE file_hash = ?", (file_hash,)
        ).fetchone()
        old_title, old_meta = (row[0], _meta(row[1])) if row else ("", {})
        merged = {**old_meta, **(meta or {})}
        with self._conn:
            self._conn.execute(
                "INSERT OR REPLACE INTO documents VALUES (?, ?, ?)",
                (file_hash, old_title if title is None else title, json.dumps(merged, ensure_ascii=False)),
            )

    def indexes(self) -> list[str]:
        """Absolute paths of the indexes registered over this store, newest first."""
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'indexes'").fetchone()
        try:
            paths = json.loads(row[0]) if row is not None else []
        except ValueError:
            return []  # a damaged list is forgotten, never fatal: indexes can be passed explicitly
        return [str(p) for p in paths if isinstance(p, str)]

    def register_index(self, path: str | Path) -> None:
        """Record the index at ``path`` as built over this store (it becomes the newest one)."""
        where = str(Path(path).expanduser().resolve())
        paths = [where, *(p for p in self.indexes() if p != where)]
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES ('indexes', ?)", (json.dumps(paths),))

    # -- writing (used by evidra.corpus.ingest) ----------------------------------------------
    def hash_of_source(self, source: str) -> str | None:
        row = self._conn.execute("SELECT file_hash FROM files WHERE source = ?", (source,)).fetchone()
        return None if row is None else str(row[0])

    def page_ids_for_hash(self, file_hash: str) -> list[str]:
        rows = self._conn.execute(
            "SELECT id FROM pages WHERE file_hash = ? ORDER BY page_number", (file_hash,)
        )
        return [r[0] for r in rows]

    def record_source(self, source: str, file_hash: str) -> None:
        """Note that ``source`` holds content already stored under ``file_hash`` (no new pages)."""
        old = self.hash_of_source(source)
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?)", (source, file_hash))
        if old is not None and old != file_hash:
            self._release(old)

    def write_file(
        self, source: str, file_hash: str, pages: Iterable[tuple[str, RenderedPage]], dpi: float | None
    ) -> list[str]:
        """Store every ``(page_id, rendered page)`` of one source file, all or nothing.

        Pages are consumed one at a time: each PNG is written under a staging name and its rows
        go into an open transaction before the next page is rendered, so memory does not grow
        with the page count. Returns the page ids written. On any exception no row is committed
        and no PNG of this call is left behind.
        """
        pages_dir = self.root / PAGES_DIR
        old = self.hash_of_source(source)
        staged: list[tuple[str, Path]] = []
        final: list[Path] = []
        try:
            for page_id, rendered in pages:
                staged.append((page_id, self._stage(rendered, page_id)))
                self._insert_page(source, file_hash, page_id, rendered, dpi)
            for page_id, staged_path in staged:
                target = pages_dir / f"{page_id}.png"
                os.replace(staged_path, target)
                final.append(target)
            self._conn.execute("INSERT OR REPLACE INTO files VALUES (?, ?)", (source, file_hash))
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            for _, staged_path in staged:
                staged_path.unlink(missing_ok=True)
            for target in final:
                target.unlink(missing_ok=True)
            raise
        if old is not None and old != file_hash:
            self._release(old)
        return [pid for pid, _ in staged]

    def _stage(self, rendered: RenderedPage, page_id: str) -> Path:
        """Write a page's PNG under a staging name in ``pages/``; removed again on failure.

        The name carries this process's id so ``clean_staging`` can tell a killed ingest's
        leftovers from files another live ingest is still writing.
        """
        fd, name = tempfile.mkstemp(
            prefix=f".{page_id}.{os.getpid()}.", suffix=STAGING_SUFFIX, dir=self.root / PAGES_DIR
        )
        path = Path(name)
        try:
            with os.fdopen(fd, "wb") as fh:
                rendered.image.save(fh, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return path

    def clean_staging(self) -> int:
        """Delete staging PNGs left by ingests that were killed; returns how many were removed.

        Files staged by a process that is still running are kept.
        """
        removed = 0
        for path in (self.root / PAGES_DIR).glob(f".*{STAGING_SUFFIX}"):
            if _writer_alive(path.name):
                continue
            path.unlink(missing_ok=True)
            removed += 1
        if removed:
            logger.info("removed %d staging files of an interrupted ingest from %s", removed, self.root)
        return removed

    def _insert_page(
        self, source: str, file_hash: str, page_id: str, r: RenderedPage, dpi: float | None
    ) -> None:
        """Add one page's rows to the open transaction (committed by ``write_file``)."""
        self._conn.execute("DELETE FROM words WHERE page_id = ?", (page_id,))
        self._conn.execute(
            "INSERT OR REPLACE INTO pages VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                page_id,
                f"{PAGES_DIR}/{page_id}.png",
                r.image.width,
                r.image.height,
                source,
                r.page_number,
                r.dpi if r.dpi is not None else dpi,
                file_hash,
            ),
        )
        self._conn.executemany(
            "INSERT INTO words VALUES (?, ?, ?, ?, ?, ?, ?)",
            [(page_id, i, w.text, *w.box.as_tuple()) for i, w in enumerate(r.words)],
        )

    def _release(self, file_hash: str) -> None:
        """A source stopped pointing at ``file_hash``: re-home or delete its pages."""
        rest = [
            r[0] for r in self._conn.execute("SELECT source FROM files WHERE file_hash = ?", (file_hash,))
        ]
        ids = self.page_ids_for_hash(file_hash)
        pngs = self._pngs_of(ids)
        with self._conn:
            if rest:
                self._conn.execute("UPDATE pages SET source = ? WHERE file_hash = ?", (min(rest), file_hash))
                return
            for page_id in ids:
                self._conn.execute("DELETE FROM words WHERE page_id = ?", (page_id,))
                self._conn.execute("DELETE FROM pages WHERE id = ?", (page_id,))
        for png in pngs:
            png.unlink(missing_ok=True)

    def check_names(self) -> None:
        """``CorpusError`` unless every page id and image path of the database names a file inside
        the store (an ingest may replace or delete those files)."""
        where = f"the page table of {self.root / DB_NAME}"
        for page_id, rel in self._conn.execute("SELECT id, image_path FROM pages"):
            inside(self.root / PAGES_DIR, f"{page_id}.png", where, CorpusError)
            inside(self.root, str(rel), where, CorpusError)

    def _pngs_of(self, page_ids: Sequence[str]) -> list[Path]:
        """The image files of ``page_ids``: ids read from the database, so each is checked to stay
        inside ``pages/`` (``CorpusError`` naming the first that does not)."""
        where = f"a page id in {self.root / DB_NAME}"
        return [inside(self.root / PAGES_DIR, f"{p}.png", where, CorpusError) for p in page_ids]

    def __repr__(self) -> str:
        return f"PageStore({str(self.root)!r}, pages={len(self)})"


def _meta(text: object) -> dict[str, str]:
    """A stored metadata object; anything else (a damaged row) reads as none."""
    try:
        data = json.loads(str(text))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _writer_alive(name: str) -> bool:
    """Whether the process that staged the file ``.{page_id}.{pid}.{random}.tmp`` still runs."""
    pid = pid_in_name(name, 2)
    return pid is not None and process_alive(pid)  # no pid: a leftover of an older evidra
