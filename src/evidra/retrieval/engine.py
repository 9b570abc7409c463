"""An index directory that knows its encoder: build from pages, open, add, delete, search.

``evidra index build`` writes ``retriever.json`` (encoder name, checkpoint path, backend) next to
the index files, so ``open_index(dir)`` can rebuild the full text-to-pages retriever. Backends:
``maxsim`` for multi-vector encoders, ``dense`` for single-vector ones, ``bm25`` over the text
layer (no model), and ``qdrant`` for multi-vector encoders whose vectors live in a Qdrant
collection (a server or cluster at ``url``, or embedded local mode in a directory); the
manifest records where, never the API key (read from ``$QDRANT_API_KEY`` on every open).

>>> engine = build_index(store.pages(), "idx/", "colqwen2", "ckpt/colqwen2")   # doctest: +SKIP
>>> engine.retriever.search(["When was Orion founded?"], k=5)                  # doctest: +SKIP
"""

from __future__ import annotations

import glob
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from evidra.devices import resolve_device, resolve_dtype
from evidra.errors import CorpusError, InvalidInputError
from evidra.models.references import recorded_ref
from evidra.retrieval.base import ENCODERS, Encoder, EncoderOptions, Retriever, VectorIndex
from evidra.retrieval.encoders import load_encoder
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.ocr import page_text
from evidra.staging import pid_in_name, process_alive
from evidra.types import Page

if TYPE_CHECKING:
    from evidra.retrieval.index.qdrant import QdrantIndex

logger = logging.getLogger(__name__)

MANIFEST = "retriever.json"
Progress = Callable[[int], None]  # called with the number of pages just embedded (bm25: read)


@dataclass(frozen=True)
class QdrantSpec:
    """Where a ``qdrant``-backed index keeps its vectors."""

    url: str = ""  # server or cluster, e.g. http://localhost:6333; empty: local mode at ``path``
    path: str = ""  # embedded local-mode directory (absolute)
    collection: str = "evidra_pages"
    candidates: int = 200  # pooled prefetch size; 0 scores the full multi-vectors exhaustively
    pool_factor: int = 4
    pooling: Literal["mean", "clustered"] = "mean"  # prefetch vectors: consecutive runs | k-means
    prefer_grpc: bool = False

    def __post_init__(self) -> None:
        if bool(self.url) == bool(self.path):
            raise InvalidInputError("a Qdrant index needs exactly one of url (a server) or path (local mode)")
        if self.candidates < 0 or self.pool_factor < 1:
            raise InvalidInputError("Qdrant candidates must be >= 0 and pool_factor >= 1")

    def check_server(self) -> None:
        """Fail fast when ``url`` names a server that does not answer (local mode: nothing to do)."""
        if self.url:
            from evidra.retrieval.index.qdrant import check_server

            key = os.environ.get("QDRANT_API_KEY") or None
            check_server(self.url, api_key=key, prefer_grpc=self.prefer_grpc)

    def connect(self, dim: int, *, create: bool) -> QdrantIndex:
        from evidra.retrieval.index.qdrant import QdrantIndex

        return QdrantIndex.connect(
            dim,
            collection=self.collection,
            url=self.url or None,
            path=self.path or None,
            api_key=(os.environ.get("QDRANT_API_KEY") or None) if self.url else None,
            prefer_grpc=self.prefer_grpc,
            pool_factor=self.pool_factor,
            pooling=self.pooling,
            candidates=self.candidates,
            create=create,
        )


@dataclass(frozen=True)
class IndexSpec:
    """What ``retriever.json`` records."""

    encoder: str  # registry name ("colqwen2", "dse", ...) or "bm25"
    encoder_path: str = ""  # checkpoint: an absolute directory, a hub id or tiny:ARCH; empty for bm25
    backend: str = "maxsim"  # maxsim | dense | bm25 | qdrant
    ocr: bool = False  # bm25 only: OCR pages that have no text layer
    qdrant: QdrantSpec | None = None  # qdrant only
    dim: int = 0  # embedding width (recorded for qdrant, whose reopening needs it)


@dataclass(frozen=True, eq=False)
class Engine:
    """An opened index directory: its spec, encoder (None for bm25), index and retriever."""

    root: Path
    spec: IndexSpec
    encoder: Encoder | None
    index: VectorIndex | BM25Retriever
    retriever: Retriever

    def add(
        self,
        pages: Sequence[Page],
        *,
        replace: bool = False,
        batch_pages: int = 32,
        progress: Progress | None = None,
    ) -> None:
        """Embed and add ``pages``; with ``replace`` pages already present are updated."""
        if isinstance(self.index, BM25Retriever):
            texts = {}
            for p in pages:  # the text layer, or OCR (slow) when the spec asks for it
                texts[p.id] = page_text(p, ocr=self.spec.ocr)
                if progress is not None:
                    progress(1)
            self.index.add(texts, {p.id: p.image_path for p in pages}, replace=replace)
            self.index.save(self.root)
            return
        assert self.encoder is not None
        for start in range(0, len(pages), batch_pages):
            batch = pages[start : start + batch_pages]
            emb = self.encoder.embed_pages(batch)
            ids, images = [p.id for p in batch], [p.image_path for p in batch]
            (self.index.update if replace else self.index.add)(ids, emb, images)
            if progress is not None:
                progress(len(batch))

    def delete(self, page_ids: Sequence[str]) -> int:
        n = self.index.delete(page_ids)
        if isinstance(self.index, BM25Retriever):
            self.index.save(self.root)
        return n

    def close(self) -> None:
        """Release the index (a Qdrant local-mode directory stays locked until then)."""
        close = getattr(self.index, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _backend(encoder: Encoder) -> str:
    return "maxsim" if encoder.kind == "multi" else "dense"


def _write_manifest(root: Path, spec: IndexSpec) -> None:
    tmp = root / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(asdict(spec), indent=2))
    os.replace(tmp, root / MANIFEST)


def read_spec(root: str | Path) -> IndexSpec:
    path = Path(root) / MANIFEST
    try:
        raw = json.loads(path.read_text())
        qdrant = raw.pop("qdrant", None)
        return IndexSpec(**raw, qdrant=None if qdrant is None else QdrantSpec(**qdrant))
    except FileNotFoundError:
        raise CorpusError(f"{str(root)!r} has no {MANIFEST}; build it with `evidra index build`") from None
    except (ValueError, TypeError) as exc:
        raise CorpusError(f"{path} is malformed ({exc}); rebuild the index") from exc


def check_encoder_args(encoder: str, encoder_path: str | Path) -> None:
    """Refuse an unknown encoder name, or a model encoder without its checkpoint, before any work."""
    if encoder == "bm25":
        return
    ENCODERS.get(encoder)  # raises with the known names and a "did you mean"
    if not str(encoder_path).strip():
        raise InvalidInputError(
            f"encoder {encoder!r} needs its checkpoint: pass --model with a {encoder} checkpoint "
            "directory, a hub id (org/name) or tiny:ARCH"
        )


def build_index(
    pages: Sequence[Page],
    root: str | Path,
    encoder: str,
    encoder_path: str | Path = "",
    *,
    options: EncoderOptions | None = None,
    maxsim: MaxSimOptions | None = None,
    ocr: bool = False,
    bm25: BM25Params | None = None,
    qdrant: QdrantSpec | None = None,
    progress: Progress | None = None,
) -> Engine:
    """Create an index directory at ``root`` holding ``pages`` embedded by ``encoder``.

    The index is built in a staging folder beside ``root`` (``.{name}.building.{pid}.*``) and
    moved to ``root`` once complete, its manifest last, so a failed or killed build leaves no
    index-looking ``root`` to block the next one; the next build removes staging folders of
    builds that no longer run. ``root`` may be missing or a folder that holds no index.

    With ``qdrant`` the vectors go to that Qdrant collection (which must be new or empty) instead
    of the directory's own exact store; the encoder must be multi-vector.
    """
    out = Path(root).expanduser().absolute()
    if (out / MANIFEST).exists():
        raise InvalidInputError(
            f"an index already exists at {str(root)!r}; use `evidra index add` or another path"
        )
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"{str(root)!r} exists and is not a folder; pick another path for the index")
    if encoder == "bm25" and qdrant is not None:
        raise InvalidInputError("bm25 keeps its own text index; the qdrant backend needs colqwen2 or colpali")
    check_encoder_args(encoder, encoder_path)
    if qdrant is not None:
        qdrant.check_server()  # before the encoder loads
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(out)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.building.{os.getpid()}.", dir=out.parent))
    try:
        spec, enc = _build_into(staging, out, pages, encoder, encoder_path, options, maxsim, ocr, bm25,
                                qdrant, progress)  # fmt: skip
        _publish(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.debug("built %s index of %d pages at %s", spec.backend, len(pages), out)
    if spec.backend == "bm25":
        retriever = BM25Retriever.load(out)
        return Engine(out, spec, None, retriever, retriever)
    assert enc is not None
    index = _open_store(out, spec, maxsim)
    return Engine(out, spec, enc, index, _joined(enc, index))


def _build_into(
    staging: Path,
    out: Path,
    pages: Sequence[Page],
    encoder: str,
    encoder_path: str | Path,
    options: EncoderOptions | None,
    maxsim: MaxSimOptions | None,
    ocr: bool,
    bm25: BM25Params | None,
    qdrant: QdrantSpec | None,
    progress: Progress | None,
) -> tuple[IndexSpec, Encoder | None]:
    """Build the complete index for ``out`` in ``staging`` and close it; returns its spec and encoder."""
    if encoder == "bm25":
        spec = IndexSpec("bm25", "", "bm25", ocr)
        retriever = BM25Retriever.build({}, bm25 or BM25Params())
        engine = Engine(staging, spec, None, retriever, retriever)
        enc = None
    else:
        enc = load_encoder(encoder, encoder_path, options)
        backend = _backend(enc)
        if qdrant is not None and backend != "maxsim":
            raise InvalidInputError(
                "the qdrant backend needs a multi-vector encoder (colqwen2, colpali); "
                f"{encoder} is single-vector"
            )
        dim = int(enc.embed_queries(["dimension probe"])[0].shape[1])
        spec = IndexSpec(
            encoder,
            recorded_ref(encoder_path),
            "qdrant" if qdrant is not None else backend,
            ocr,
            qdrant=qdrant,
            dim=dim,
        )
        index = _create_store(staging, _staged(spec, out, staging), maxsim)
        engine = Engine(staging, spec, enc, index, _joined(enc, index))
    try:
        engine.add(pages, progress=progress)
    finally:
        engine.close()  # release files and locks before the folder is renamed (or removed)
    _write_manifest(staging, spec)
    return spec, enc


def _publish(staging: Path, out: Path) -> None:
    """Move the finished index in ``staging`` to ``out``, its manifest last.

    A missing ``out`` is one rename. Into an existing folder (one with inline images, say) each
    entry moves on its own, replacing an entry of the same name: ``out`` has no manifest, so such
    an entry can only be the leftover of a build interrupted while publishing.
    """
    if not out.exists():
        os.rename(staging, out)
        return
    for entry in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST):
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
    staging.rmdir()


def _staged(spec: IndexSpec, out: Path, staging: Path) -> IndexSpec:
    """``spec`` with a Qdrant local-mode folder inside ``out`` moved into ``staging`` for the build."""
    if spec.qdrant is None or not spec.qdrant.path:
        return spec
    local = Path(spec.qdrant.path)
    if not local.is_relative_to(out):
        return spec
    return replace(spec, qdrant=replace(spec.qdrant, path=str(staging / local.relative_to(out))))


def _remove_stale_builds(out: Path) -> None:
    """Remove staging folders of earlier builds of ``out`` whose process no longer runs."""
    for path in out.parent.glob(f".{glob.escape(out.name)}.building.*"):
        pid = pid_in_name(path.name[len(out.name) + 1 :], 2)
        if path.is_dir() and (pid is None or not process_alive(pid)):
            logger.info("removing %s, left by an interrupted index build", path)
            shutil.rmtree(path, ignore_errors=True)


def open_index(
    root: str | Path,
    *,
    encoder_path: str | Path | None = None,
    options: EncoderOptions | None = None,
    maxsim: MaxSimOptions | None = None,
) -> Engine:
    """Open an index directory; ``encoder_path`` overrides the checkpoint recorded at build time."""
    path = Path(root)
    spec = read_spec(path)
    if spec.backend == "bm25":
        retriever = BM25Retriever.load(path)
        return Engine(path, spec, None, retriever, retriever)
    index = _open_store(path, spec, maxsim)  # first: a missing store fails before a model loads
    try:
        enc = load_encoder(spec.encoder, encoder_path or spec.encoder_path, options)
    except BaseException:
        index.close()
        raise
    return Engine(path, spec, enc, index, _joined(enc, index))


def open_searcher(where: str, required: Collection[str] = ()) -> Retriever:
    """Text-to-pages search at ``where``: a ``serve-index`` URL or an index directory.

    An index directory must hold every page id in ``required`` (e.g. the gold pages a reward
    checks retrieval against); a URL is trusted, since a service cannot list its pages cheaply.
    The query encoder runs on the GPU in bfloat16 when one is present (the released ColQwen2 /
    ColPali dtype), else on the CPU in float32.
    """
    if where.startswith(("http://", "https://")):
        from evidra.retrieval.client import SearchClient

        return SearchClient(where)
    options = EncoderOptions(device=resolve_device("auto"), dtype=resolve_dtype("auto", "auto"))
    engine = open_index(where, options=options)
    missing = sorted(set(required) - set(engine.index.page_ids()))
    if missing:
        engine.close()
        raise InvalidInputError(
            f"index {where} lacks {len(missing)} gold pages of the samples (e.g. {', '.join(missing[:3])}); "
            "build it over the same pages (evidra index build --dataset NAME --data PATH, or --store)"
        )
    return engine.retriever


def open_store_only(root: str | Path) -> VectorIndex | BM25Retriever:
    """The index of a directory without loading its encoder (enough to delete or list pages)."""
    path = Path(root)
    spec = read_spec(path)
    if spec.backend == "bm25":
        return BM25Retriever.load(path)
    return _open_store(path, spec, None)


def _create_store(root: Path, spec: IndexSpec, maxsim: MaxSimOptions | None) -> Any:
    if spec.qdrant is not None:
        index = spec.qdrant.connect(spec.dim, create=True)
        held = len(index)
        if held:
            index.close()
            where = spec.qdrant.url or spec.qdrant.path
            raise InvalidInputError(
                f"Qdrant collection {spec.qdrant.collection!r} at {where} already holds {held} pages; "
                "pass another --collection, or add to it through the index directory that built it"
            )
        return index
    if spec.backend == "maxsim":
        return MultiVectorIndex.create(root, spec.dim, options=maxsim, encoder=spec.encoder)
    return DenseIndex.create(root, spec.dim, device=(maxsim or MaxSimOptions()).device, encoder=spec.encoder)


def _open_store(root: Path, spec: IndexSpec, maxsim: MaxSimOptions | None) -> Any:
    if spec.backend == "qdrant":
        if spec.qdrant is None or spec.dim < 1:
            raise CorpusError(
                f"{root / MANIFEST} names the qdrant backend without its connection; rebuild it"
            )
        return spec.qdrant.connect(spec.dim, create=False)
    if spec.backend == "maxsim":
        return MultiVectorIndex.open(root, options=maxsim)
    return DenseIndex.open(root, device=(maxsim or MaxSimOptions()).device)


def _joined(encoder: Encoder, index: VectorIndex) -> Retriever:
    from evidra.retrieval.base import EncodedRetriever

    return EncodedRetriever(encoder, index)
