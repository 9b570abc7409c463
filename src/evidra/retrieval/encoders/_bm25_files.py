"""On-disk form of a BM25 index: a folder of JSON and ``.npy``/``.npz`` files, movable as a whole.

Layout inside the index directory::

    bm25.index.json        {"format": 1, "engine": "bm25s", "folder": "bm25-XXXX"}: the live version
    bm25-XXXX/pages.json   k1, b, scoring variant, analyzer (language, stop words, stemming; absent in
                           indexes older than analyzers: plain tokens), page ids, image paths relative
                           to the index directory
    bm25-XXXX/counts.npz   per-page term counts (CSR: indptr, terms, counts), for add/delete
    bm25-XXXX/*.index.*    the bm25s engine as ``bm25s.BM25.save`` writes it (scores, vocabulary, params)

A save writes a fresh ``bm25-*`` folder, fsyncs it, then replaces ``bm25.index.json`` atomically
and removes the older folders, so a crash leaves the previous index readable. Nothing is
unpickled: arrays load with ``allow_pickle=False`` and everything else is JSON. Every path
recorded is relative, so the directory can be moved (with the page images, where they live inside it).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import numpy as np

from evidra.core.jsonvalue import JSON, JSONObject, json_kind
from evidra.retrieval.encoders._bm25_params import BM25Params
from evidra.retrieval.encoders._bm25_terms import IDF_METHOD, METHOD, TermCounts, bm25s_module
from evidra.retrieval.encoders._bm25_text import LANGUAGES
from evidra.safeio.jsonfiles import MAX_FILE_BYTES, read_capped_text
from evidra.safeio.staging import fsync_path

if TYPE_CHECKING:
    import bm25s

MANIFEST = "bm25.index.json"
LEGACY_FILE = "bm25.json"  # the single JSON file of evidra before the bm25s engine
FORMAT = 1
_FOLDER = re.compile(r"bm25-[A-Za-z0-9_]+")


class IndexFileError(Exception):
    """Why an index folder cannot be read (turned into a ``CorpusError`` by the caller)."""


@dataclass(frozen=True, eq=False)
class Stored:
    """Everything a BM25 index directory holds, with image paths made absolute again."""

    params: BM25Params
    ids: list[str]
    images: list[str]
    counts: TermCounts
    engine: bm25s.BM25 | None  # None when no page has a token


def write_index(
    root: Path,
    params: BM25Params,
    ids: Sequence[str],
    images: Sequence[str],
    counts: TermCounts,
    engine: bm25s.BM25 | None,
) -> Path:
    """Save into directory ``root`` (see the module docstring); returns the manifest's path."""
    root.mkdir(parents=True, exist_ok=True)
    base = root.absolute()
    folder = Path(tempfile.mkdtemp(prefix="bm25-", dir=root))
    try:
        pages = {
            "k1": params.k1,
            "b": params.b,
            "method": METHOD,
            "idf_method": IDF_METHOD,
            "language": params.language,
            "stopwords": params.stopwords,
            "stem": params.stem,
            "ids": list(ids),
            "images": [os.path.relpath(p, base) if p else "" for p in images],
        }
        (folder / "pages.json").write_text(json.dumps(pages))
        with open(folder / "counts.npz", "wb") as f:
            np.savez_compressed(f, indptr=counts.indptr, terms=counts.terms, counts=counts.counts)
        if engine is not None:
            engine.save(folder, allow_pickle=False, show_progress=False)
        for file in folder.iterdir():
            fsync_path(file)
        fsync_path(folder)
        manifest = {"format": FORMAT, "engine": "bm25s", "folder": folder.name}
        _write_atomic(root / MANIFEST, json.dumps(manifest))
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    for old in root.glob("bm25-*"):
        if old != folder and old.is_dir() and _FOLDER.fullmatch(old.name):
            shutil.rmtree(old, ignore_errors=True)
    return root / MANIFEST


def read_index(root: Path) -> Stored:
    """Read what ``write_index`` saved; raises ``IndexFileError`` naming what is wrong."""
    if not (root / MANIFEST).is_file():
        if (root / LEGACY_FILE).is_file():
            raise IndexFileError(f"it is in the format of an older evidra ({LEGACY_FILE})")
        raise IndexFileError(f"there is no {MANIFEST}")
    for attempt in range(2):
        folder = _live_folder(root)
        try:
            return _read_folder(root, folder)
        except FileNotFoundError:
            if attempt or _live_folder(root) == folder:  # not a save that replaced it meanwhile
                raise
    raise AssertionError("unreachable")


def _live_folder(root: Path) -> Path:
    with _reading(MANIFEST):
        manifest = _json(root / MANIFEST)
    folder = manifest.get("folder")
    if manifest.get("format") != FORMAT or not isinstance(folder, str) or not _FOLDER.fullmatch(folder):
        raise IndexFileError(f"{MANIFEST} names no format {FORMAT} index folder")
    return root / folder


@contextmanager
def _reading(name: str) -> Iterator[None]:
    """Name the file in any error that reading it raises (a missing file stays as it is, for the retry)."""
    try:
        yield
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError, AttributeError, zipfile.BadZipFile) as exc:
        raise IndexFileError(f"{name} cannot be read: {exc}") from exc


def _read_folder(root: Path, folder: Path) -> Stored:
    with _reading("pages.json"):
        pages = _json(folder / "pages.json")
        k1, b = _float(pages["k1"]), _float(pages["b"])
        params = _params(pages, k1, b)
    ids, images = pages.get("ids"), pages.get("images")
    if not _strings(ids) or not _strings(images) or len(ids) != len(images) or len(set(ids)) != len(ids):
        raise IndexFileError("pages.json needs as many image paths as distinct page ids")
    if (pages.get("method"), pages.get("idf_method")) != (METHOD, IDF_METHOD):
        raise IndexFileError(f"pages.json names another scoring variant than {METHOD}/{IDF_METHOD}")
    engine = None
    vocab: tuple[str, ...] = ()
    if (folder / "params.index.json").exists():
        with _reading(f"the bm25s files in {folder.name}"):
            engine = bm25s_module().BM25.load(folder, allow_pickle=False, mmap=False, backend="numpy")
        vocab = _vocab(engine.vocab_dict)
        _check_engine(engine, k1, b, len(ids), len(vocab))
    pairs = 0 if engine is None else len(engine.scores["indices"])  # one score per (page, term) pair
    with _reading("counts.npz"):
        _check_declared(folder / "counts.npz", {"indptr": len(ids) + 1, "terms": pairs, "counts": pairs})
        with np.load(folder / "counts.npz", allow_pickle=False) as npz:
            counts = TermCounts(vocab, npz["indptr"], npz["terms"], npz["counts"])
    _check_counts(counts, len(ids))
    base = root.absolute()
    absolute = [os.path.normpath(base / p) if p else "" for p in images]
    return Stored(params, list(ids), absolute, counts, engine)


def _float(value: JSON) -> float:
    """``float(value)`` of a number or its text; anything else a ``TypeError`` (read as unreadable)."""
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"float() argument must be a string or a real number, not {json_kind(value)}")
    return float(value)


def _params(pages: JSONObject, k1: float, b: float) -> BM25Params:
    """The parameters ``pages.json`` records; an index without an analyzer used plain tokens."""
    language, stopwords, stem = pages.get("language", "none"), pages.get("stopwords"), pages.get("stem")
    if not isinstance(language, str) or language not in LANGUAGES:
        raise IndexFileError(f"pages.json names an unknown language {str(language)[:40]!r}")
    return BM25Params(k1, b, language, stopwords is not False, stem is True)


def _check_declared(path: Path, most: dict[str, int]) -> None:
    """Refuse ``counts.npz`` before decompressing it if a member declares more elements than
    ``most`` allows (the page count, and the bm25s index's own number of (page, term) pairs, read
    from uncompressed files) or more bytes than its header and data need: a few megabytes of
    compressed zeros would otherwise expand to gigabytes."""
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: info for info in archive.infolist()}
        for name, limit in most.items():
            info = members.get(f"{name}.npy")
            if info is None:
                raise IndexFileError(f"counts.npz has no {name} array")
            with archive.open(info) as fh:
                version = np.lib.format.read_magic(fh)
                read = (
                    np.lib.format.read_array_header_1_0
                    if version == (1, 0)
                    else np.lib.format.read_array_header_2_0
                )
                shape, _, dtype = read(fh)
                header = fh.tell()
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if count > limit or dtype.itemsize > 8 or info.file_size > header + limit * 8:
                raise IndexFileError(
                    f"counts.npz declares {name} of shape {shape} ({info.file_size} bytes unpacked), more "
                    f"than the {limit} entries the index holds"
                )


def _check_engine(engine: bm25s.BM25, k1: float, b: float, n_pages: int, n_terms: int) -> None:
    data, indices, indptr = (engine.scores[key] for key in ("data", "indices", "indptr"))
    if (engine.k1, engine.b, engine.method, engine.idf_method) != (k1, b, METHOD, IDF_METHOD):
        raise IndexFileError("the bm25s parameters differ from pages.json")
    if engine.scores["num_docs"] != n_pages or indptr.shape != (n_terms + 1,):
        raise IndexFileError("the bm25s index does not match the page list")
    _check_csr(indptr, indices, "the bm25s score arrays")
    if data.shape != indices.shape or (len(indices) and int(indices.max()) >= n_pages):
        raise IndexFileError("the bm25s score arrays name pages that do not exist")


def _check_counts(counts: TermCounts, n_pages: int) -> None:
    if counts.indptr.shape != (n_pages + 1,):
        raise IndexFileError("counts.npz does not hold one row per page")
    _check_csr(counts.indptr, counts.terms, "the arrays of counts.npz")
    if counts.counts.shape != counts.terms.shape or counts.counts.dtype.kind not in "iu":
        raise IndexFileError("counts.npz holds no integer count per term")
    if np.any(counts.counts < 1) or (len(counts.terms) and counts.terms.max() >= len(counts.vocab)):
        raise IndexFileError("counts.npz names terms that the vocabulary lacks")


def _check_csr(indptr: np.ndarray, indices: np.ndarray, what: str) -> None:
    """Integer 1-D arrays where row ``i`` is ``indices[indptr[i]:indptr[i + 1]]`` and no index is negative."""
    if (
        indptr.ndim != 1
        or indices.ndim != 1
        or indptr.dtype.kind not in "iu"
        or indices.dtype.kind not in "iu"
    ):
        raise IndexFileError(f"{what} are not 1-D integer arrays")
    if indptr[0] != 0 or indptr[-1] != len(indices) or np.any(np.diff(indptr) < 0):
        raise IndexFileError(f"{what} do not split into rows")
    if len(indices) and int(indices.min()) < 0:
        raise IndexFileError(f"{what} hold negative indices")


def _vocab(vocab_dict: object) -> tuple[str, ...]:
    if not isinstance(vocab_dict, dict) or sorted(vocab_dict.values()) != list(range(len(vocab_dict))):
        raise IndexFileError("the bm25s vocabulary does not number its terms 0..V-1")
    by_id = sorted(vocab_dict.items(), key=lambda item: item[1])
    return tuple(str(term) for term, _ in by_id)


def _json(path: Path) -> JSONObject:
    data: JSON = json.loads(read_capped_text(path, "BM25 index file", MAX_FILE_BYTES, "rebuild the index"))
    if not isinstance(data, dict):
        raise IndexFileError(f"{path.name} is not a JSON object")
    return data


def _strings(value: object) -> TypeGuard[list[str]]:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_path(path.parent)
