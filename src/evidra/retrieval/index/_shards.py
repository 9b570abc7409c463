"""Crash-safe on-disk storage shared by the embedded indexes: fp16 shards + SQLite metadata.

Layout of an index directory::

    index.sqlite          meta(key, value); shards(name, rows, dim, sha256);
                          pages(page_id, shard, offset, length, image_path)
    shards/NNNNNN.npy     float16 arrays of shape (rows, D), immutable once written

A change is a ``ShardBatch``: each group of pages it writes becomes a shard (a temporary file,
fsynced and renamed), and the batch's ``commit`` references all of them, and removes replaced
pages, in one SQLite transaction; so an ``index add`` of many groups becomes visible at once or
not at all. Deleting pages removes their rows (their vectors become tombstoned space in the
shard) and compaction rewrites the live vectors into fresh shards before one transaction
switches over. A crash at any point leaves the previous, fully consistent index: at worst
unreferenced shard files, which the next writer removes. ``open`` checks every shard's shape
against the metadata and, with ``verify=True``, its sha256.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.safeio.confined import inside
from evidra.safeio.staging import fsync_path

logger = logging.getLogger(__name__)

FORMAT_VERSION = "1"
DB_NAME = "index.sqlite"
SHARDS_DIR = "shards"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS shards (name TEXT PRIMARY KEY, rows INTEGER NOT NULL, dim INTEGER NOT NULL,
    sha256 TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pages (page_id TEXT PRIMARY KEY, shard TEXT NOT NULL REFERENCES shards(name),
    offset INTEGER NOT NULL, length INTEGER NOT NULL, image_path TEXT NOT NULL DEFAULT '');
"""


@dataclass(frozen=True)
class PageRecord:
    """Where one page's vectors live: ``shard[offset : offset + length]``."""

    page_id: str
    shard: str
    offset: int
    length: int
    image_path: str


def write_array_atomic(path: Path, array: np.ndarray) -> str:
    """Write ``array`` as ``.npy`` via temp file + fsync + rename; returns its sha256."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".npy")
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, array, allow_pickle=False)
            f.flush()
            os.fsync(f.fileno())
        digest = file_sha256(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
    return digest


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


class ShardStore:
    """Metadata and shard files of one index directory (see the module docstring)."""

    def __init__(self, root: Path, conn: sqlite3.Connection) -> None:
        self.root = root
        self._conn = conn

    @classmethod
    def create(
        cls, path: str | Path, *, kind: str, dim: int, extra: dict[str, str] | None = None
    ) -> ShardStore:
        root = Path(path)
        if (root / DB_NAME).exists():
            raise InvalidInputError(f"an index already exists at {str(root)!r}; open it or pick another path")
        if dim < 1:
            raise InvalidInputError(f"embedding dim must be >= 1, got {dim}")
        (root / SHARDS_DIR).mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(root / DB_NAME, check_same_thread=False)
        with conn:
            conn.executescript(_SCHEMA)
            meta = {"format_version": FORMAT_VERSION, "kind": kind, "dim": str(dim), **(extra or {})}
            conn.executemany("INSERT INTO meta VALUES (?, ?)", sorted(meta.items()))
        return cls(root, conn)

    @classmethod
    def open(cls, path: str | Path) -> ShardStore:
        root = Path(path)
        if not (root / DB_NAME).is_file():
            raise CorpusError(
                f"{str(root)!r} is not an evidra index (no {DB_NAME}); build one with `evidra index build`"
            )
        conn = sqlite3.connect(root / DB_NAME, check_same_thread=False)
        store = cls(root, conn)
        try:
            version = store.meta().get("format_version")
        except sqlite3.DatabaseError as exc:  # not a database, or an empty file with no tables
            conn.close()
            raise CorpusError(
                f"index {str(root)!r}: {DB_NAME} is unreadable ({exc}); rebuild the index with "
                "`evidra index build`"
            ) from exc
        if version != FORMAT_VERSION:
            raise CorpusError(
                f"index {str(root)!r} has format {version!r}; this evidra reads {FORMAT_VERSION!r}"
            )
        return store

    def close(self) -> None:
        self._conn.close()

    def meta(self) -> dict[str, str]:
        return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())

    def set_meta(self, key: str, value: str) -> None:
        """Record ``key = value`` in the index's metadata (one transaction)."""
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))

    @property
    def dim(self) -> int:
        return int(self.meta()["dim"])

    def records(self) -> list[PageRecord]:
        rows = self._conn.execute(
            "SELECT page_id, shard, offset, length, image_path FROM pages ORDER BY shard, offset"
        ).fetchall()
        return [PageRecord(*row) for row in rows]

    def shard_names(self) -> list[str]:
        return [r[0] for r in self._conn.execute("SELECT name FROM shards ORDER BY name")]

    def contains(self, page_ids: Sequence[str]) -> list[str]:
        present = []
        for pid in page_ids:
            if self._conn.execute("SELECT 1 FROM pages WHERE page_id = ?", (pid,)).fetchone():
                present.append(pid)
        return present

    # -- reading -------------------------------------------------------------------------------

    def shard_path(self, name: str) -> Path:
        """The file of shard ``name`` (a name read from ``index.sqlite``, so checked to stay inside)."""
        return inside(self.root / SHARDS_DIR, name, f"{self.root / DB_NAME} (shard table)", CorpusError)

    def load_shards(self, *, verify: bool = True, mmap: bool = True) -> dict[str, np.ndarray]:
        """Every referenced shard as a ``(rows, D)`` float16 array, checked against the metadata."""
        dim = self.dim
        out: dict[str, np.ndarray] = {}
        for name, rows, sdim, digest in self._conn.execute("SELECT name, rows, dim, sha256 FROM shards"):
            path = self.shard_path(name)
            if not path.is_file():
                raise CorpusError(f"index {str(self.root)!r} is missing shard {name}; rebuild the index")
            if verify and file_sha256(path) != digest:
                raise CorpusError(f"shard {path} fails its checksum (corrupted); rebuild the index")
            array = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
            if array.shape != (rows, sdim) or sdim != dim or array.dtype != np.float16:
                raise CorpusError(
                    f"shard {path} has shape {array.shape} {array.dtype}, metadata says ({rows}, {sdim}) "
                    f"float16 with dim {dim}; rebuild the index"
                )
            out[name] = array
        for rec in self.records():
            rows_in = out[rec.shard].shape[0] if rec.shard in out else -1
            if rec.offset < 0 or rec.length < 1 or rec.offset + rec.length > rows_in:
                raise CorpusError(f"page {rec.page_id!r} points outside shard {rec.shard}; rebuild the index")
        return out

    # -- writing -------------------------------------------------------------------------------

    def _new_shard_name(self) -> str:
        names = self.shard_names() + [p.name for p in (self.root / SHARDS_DIR).glob("*.npy")]
        last = max((int(n.split(".")[0]) for n in names if n.split(".")[0].isdigit()), default=-1)
        return f"{last + 1:06d}.npy"

    def begin(self) -> ShardBatch:
        """Start a change: shards written through it stay invisible until its ``commit``."""
        self.collect_garbage()  # a killed writer's shards (no live writer shares an index)
        return ShardBatch(self)

    def delete_pages(self, page_ids: Sequence[str]) -> int:
        with self._conn:
            cur = self._conn.executemany("DELETE FROM pages WHERE page_id = ?", [(p,) for p in page_ids])
        return max(cur.rowcount, 0)

    def dead_fraction(self) -> float:
        total = self._conn.execute("SELECT COALESCE(SUM(rows), 0) FROM shards").fetchone()[0]
        live = self._conn.execute("SELECT COALESCE(SUM(length), 0) FROM pages").fetchone()[0]
        return 0.0 if total == 0 else 1.0 - live / total

    def compact(self, *, shard_rows: int = 1 << 20) -> None:
        """Rewrite live vectors into fresh shards of <= ``shard_rows`` rows; drop tombstoned space."""
        shards = self.load_shards(verify=False)
        records = self.records()
        new: list[tuple[str, int, int, str]] = []
        moved: list[tuple[str, int, str]] = []
        for group in _chunks(records, shard_rows):
            name = self._new_shard_name() if not new else f"{int(new[-1][0][:6]) + 1:06d}.npy"
            parts = [np.asarray(shards[r.shard][r.offset : r.offset + r.length]) for r in group]
            array = np.concatenate(parts)
            digest = write_array_atomic(self.root / SHARDS_DIR / name, array)
            new.append((name, int(array.shape[0]), int(array.shape[1]), digest))
            offset = 0
            for r in group:
                moved.append((name, offset, r.page_id))
                offset += r.length
        old = self.shard_names()
        with self._conn:
            self._conn.executemany("INSERT INTO shards VALUES (?, ?, ?, ?)", new)
            self._conn.executemany("UPDATE pages SET shard = ?, offset = ? WHERE page_id = ?", moved)
            self._conn.executemany("DELETE FROM shards WHERE name = ?", [(n,) for n in old])
        del shards
        self.collect_garbage()
        logger.info("compacted %s: %d shards -> %d", self.root, len(old), len(new))

    def collect_garbage(self) -> None:
        """Remove shard files no transaction references (left by a crash or a compaction)."""
        keep = set(self.shard_names())
        for path in (self.root / SHARDS_DIR).iterdir():
            if path.name not in keep:
                path.unlink(missing_ok=True)


class ShardBatch:
    """Pages written as shards now and made visible together by ``commit`` (see the module docstring)."""

    def __init__(self, store: ShardStore) -> None:
        self.store = store
        self._shards: list[tuple[str, int, int, str]] = []  # name, rows, dim, sha256
        self._records: list[PageRecord] = []
        self._ids: set[str] = set()

    def write(
        self, page_ids: Sequence[str], vectors: Sequence[np.ndarray], image_paths: Sequence[str]
    ) -> None:
        """Write ``page_ids`` as one new shard, not yet referenced by the index."""
        twice = sorted(self._ids.intersection(page_ids))
        if twice:
            raise InvalidInputError(f"pages given twice in one change: {twice[:5]}")
        if not page_ids:
            return
        name = self.store._new_shard_name()
        array = np.concatenate([np.asarray(v, dtype=np.float16) for v in vectors])  # (sum L, D)
        digest = write_array_atomic(self.store.root / SHARDS_DIR / name, array)
        self._shards.append((name, int(array.shape[0]), int(array.shape[1]), digest))
        offset = 0
        for pid, vec, img in zip(page_ids, vectors, image_paths, strict=True):
            self._records.append(PageRecord(pid, name, offset, int(vec.shape[0]), img))
            offset += int(vec.shape[0])
        self._ids.update(page_ids)

    def commit(
        self, *, replace: Sequence[str] = (), meta: Mapping[str, str] | None = None
    ) -> list[PageRecord]:
        """Reference every written shard, drop the ``replace`` pages first, and set ``meta``: one
        transaction. Returns the records of the written pages."""
        conn = self.store._conn
        with conn:
            conn.executemany("DELETE FROM pages WHERE page_id = ?", [(p,) for p in replace])
            conn.executemany("INSERT INTO shards VALUES (?, ?, ?, ?)", self._shards)
            conn.executemany(
                "INSERT INTO pages VALUES (?, ?, ?, ?, ?)",
                [(r.page_id, r.shard, r.offset, r.length, r.image_path) for r in self._records],
            )
            conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)", sorted((meta or {}).items()))
        return list(self._records)

    def discard(self) -> None:
        """Remove the shards written so far (after a failure: they were never referenced)."""
        for name, *_ in self._shards:
            (self.store.root / SHARDS_DIR / name).unlink(missing_ok=True)
        self._shards, self._records = [], []


def _chunks(records: Sequence[PageRecord], max_rows: int) -> Iterator[list[PageRecord]]:
    group: list[PageRecord] = []
    rows = 0
    for rec in records:
        if group and rows + rec.length > max_rows:
            yield group
            group, rows = [], 0
        group.append(rec)
        rows += rec.length
    if group:
        yield group
