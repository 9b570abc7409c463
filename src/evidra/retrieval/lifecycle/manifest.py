"""``retriever.json``: what an index directory holds (encoder, checkpoint, backend), and the BM25
files it names, replaced all at once (``_staging``)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from evidra.core.errors import CorpusError
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.lifecycle.publish import fsync_path, save_generation
from evidra.retrieval.lifecycle.qdrant_build import QdrantSpec
from evidra.safeio.confined import inside
from evidra.safeio.jsonfiles import read_capped_text

MANIFEST = "retriever.json"


@dataclass(frozen=True)
class IndexSpec:
    """What ``retriever.json`` records."""

    encoder: str  # registry name ("colqwen2", "dse", ...) or "bm25"
    encoder_path: str = ""  # checkpoint: an absolute directory, a hub id or tiny:ARCH; empty for bm25
    backend: str = "maxsim"  # a name in ``stores.INDEXES``: maxsim | dense | bm25 | qdrant | qdrant-edge
    ocr: bool = False  # bm25 only: OCR pages that have no text layer
    qdrant: QdrantSpec | None = None  # qdrant and qdrant-edge only
    dim: int = 0  # embedding width (recorded for qdrant, whose reopening needs it)
    data_dir: str = ""  # bm25: the folder of the index holding its files (empty: the index itself)
    store: str = ""  # the page store it was built over (absolute), for file names, titles and filters
    encoder_fingerprint: str = ""  # of the checkpoint that embedded the pages (``fingerprint``); "" for bm25


def write_manifest(root: Path, spec: IndexSpec) -> None:
    tmp = root / f".{MANIFEST}.tmp"
    with tmp.open("w") as f:
        record = asdict(spec)
        if spec.qdrant is not None:
            record["qdrant"] = spec.qdrant.record()
        f.write(json.dumps(record, indent=2))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / MANIFEST)
    fsync_path(root)


def read_spec(root: str | Path) -> IndexSpec:
    path = Path(root) / MANIFEST
    if Path(root).exists() and not Path(root).is_dir():
        raise CorpusError(
            f"{str(root)!r} is a file, not an index folder; pass the folder `evidra index build --out` wrote"
        )
    try:
        raw = json.loads(read_capped_text(path, "index manifest", fix="rebuild the index"))
        qdrant = raw.pop("qdrant", None)
        spec = IndexSpec(**raw, qdrant=None if qdrant is None else QdrantSpec.from_record(qdrant))
    except FileNotFoundError:
        raise CorpusError(f"{str(root)!r} has no {MANIFEST}; build it with `evidra index build`") from None
    except OSError as exc:
        raise CorpusError(f"{path} cannot be read ({exc.strerror or exc}); check the index folder") from None
    except (ValueError, TypeError, AttributeError, RecursionError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise CorpusError(f"{path} is malformed ({reason}); rebuild the index") from None
    if spec.data_dir != "":  # save_bm25 replaces and removes this folder
        inside(root, spec.data_dir, f"data_dir in {path}", CorpusError)
    return spec


def note_store(root: str | Path, store: str | Path) -> None:
    """Record in the manifest of index ``root`` the page store its pages come from."""
    spec = read_spec(root)
    write_manifest(Path(root), replace(spec, store=str(Path(store).expanduser().resolve())))


def save_bm25(root: Path, retriever: BM25Retriever) -> None:
    """Replace the BM25 files of index ``root`` by ``retriever``'s, all at once (``_staging``):
    a new folder, then the manifest naming it, then the old folder removed. An index whose files
    sit in the index folder itself (``data_dir`` empty) keeps them there, unread, once moved."""
    spec = read_spec(root)
    new = save_generation(root, "bm25", retriever.save, keep=spec.data_dir)
    try:
        write_manifest(root, replace(spec, data_dir=new))
    except BaseException:
        shutil.rmtree(root / new, ignore_errors=True)
        raise
    if spec.data_dir:
        shutil.rmtree(root / spec.data_dir, ignore_errors=True)


def load_bm25(root: Path, spec: IndexSpec) -> BM25Retriever:
    try:
        return BM25Retriever.load(root / spec.data_dir)
    except CorpusError:
        again = read_spec(root)  # a writer may have switched folders between the two reads
        if again.data_dir == spec.data_dir:
            raise
        return BM25Retriever.load(root / again.data_dir)
