"""An index directory that knows its encoder: build from pages, open, add, delete, search.

``evidra index build`` writes ``retriever.json`` (encoder name, checkpoint path, backend) next to
the index files, so ``open_index(dir)`` can rebuild the full text-to-pages retriever. Backends:
``maxsim`` for multi-vector encoders, ``dense`` for single-vector ones, ``bm25`` over the text
layer (no model), and for multi-vector encoders whose vectors live in Qdrant ``qdrant`` (a
collection on a server or cluster at ``url``) or ``qdrant-edge`` (Qdrant's engine embedded in the
process, its shard a folder of the index); the manifest records where, never the API key (read
from ``$QDRANT_API_KEY`` on every open).

Changes never show half done: a build is staged beside the directory and moved in (``_staging``);
``Engine.add`` commits all its batches at once on the directory's own stores (``ShardBatch``, or a
new BM25 folder that the manifest then names); a build on a Qdrant server fills a new collection
and makes the asked-for name its alias at the end (``qdrant_build``).

>>> engine = build_index(store.pages(), "idx/", "colqwen2", "ckpt/colqwen2")   # doctest: +SKIP
>>> engine.retriever.search(["When was Orion founded?"], k=5)                  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidra.core.devices import resolve_device, resolve_dtype
from evidra.core.errors import InvalidInputError
from evidra.core.types import Page
from evidra.models.references import (
    TINY_PREFIX,
    looks_like_path,
    parse_hub_id,
    recorded_ref,
    resolve_model_ref,
)
from evidra.retrieval.encoders import load_encoder
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from evidra.retrieval.index.multivector import MaxSimOptions
from evidra.retrieval.interfaces import ENCODERS, Encoder, EncoderOptions, Retriever, VectorIndex
from evidra.retrieval.lifecycle.backends import INDEXES, AddRequest, Progress, StoreOptions, text_index
from evidra.retrieval.lifecycle.fingerprint import check_encoder, fingerprint
from evidra.retrieval.lifecycle.manifest import MANIFEST as MANIFEST
from evidra.retrieval.lifecycle.manifest import IndexSpec as IndexSpec
from evidra.retrieval.lifecycle.manifest import read_spec as read_spec
from evidra.retrieval.lifecycle.manifest import save_bm25 as save_bm25
from evidra.retrieval.lifecycle.manifest import write_manifest
from evidra.retrieval.lifecycle.publish import publish, remove_stale_builds
from evidra.retrieval.lifecycle.qdrant_build import QdrantSpec as QdrantSpec
from evidra.retrieval.lifecycle.qdrant_build import drop_noted
from evidra.safeio.keys import KeyPolicy

logger = logging.getLogger(__name__)


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
        """Embed and add ``pages``; with ``replace`` pages already present are updated.

        All or nothing for the directory's own stores: a failure or kill leaves the index files as
        they were (after a failed BM25 save this retriever still holds the pages: reopen it). A
        Qdrant collection gets each batch as it is embedded (``QdrantIndex.add_batches``).
        """
        backend = INDEXES.get(self.spec.backend)
        backend.add(
            self.index, AddRequest(pages, self.encoder, self.spec.ocr, replace, batch_pages, progress)
        )
        backend.commit(self.root, self.index)

    def delete(self, page_ids: Sequence[str]) -> int:
        n = self.index.delete(page_ids)
        INDEXES.get(self.spec.backend).commit(self.root, self.index)
        return n

    def close(self) -> None:
        """Release the index (a Qdrant Edge shard stays locked until then)."""
        close = getattr(self.index, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _engine(root: Path, spec: IndexSpec, encoder: Encoder | None, index: Any) -> Engine:
    return Engine(root, spec, encoder, index, index if encoder is None else _joined(encoder, index))


def check_encoder_args(encoder: str, encoder_path: str | Path) -> None:
    """Refuse an unknown encoder name, or a model encoder without its checkpoint, before any work."""
    if text_index(encoder):
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
    overwrite: bool = False,
) -> Engine:
    """Create an index directory at ``root`` holding ``pages`` embedded by ``encoder``.

    The index is built in a staging folder beside ``root`` (``.{name}.building.{pid}.*``) and
    moved to ``root`` once complete, its manifest last, so a failed or killed build leaves no
    index-looking ``root`` to block the next one; the next build removes staging folders of
    builds that no longer run. ``root`` may be missing or a folder that holds no index; with
    ``overwrite`` it may hold one, which the new index replaces once complete (its ``images``
    folder of inline benchmark images stays).

    With ``qdrant`` the vectors go to Qdrant instead of the directory's own exact store: with a
    ``url``, to a new collection on that server, which ``qdrant.collection`` (new, or empty) names
    as its alias once every page is in (``qdrant_build``); without one, to a Qdrant Edge shard in
    the folder ``qdrant.path`` of the index. The encoder must be multi-vector.
    """
    out = Path(root).expanduser().absolute()
    replacing = (out / MANIFEST).exists()
    if replacing and not overwrite:
        raise InvalidInputError(
            f"an index already exists at {str(root)!r}; use `evidra index add`, another path, or "
            "--overwrite to replace it"
        )
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"{str(root)!r} exists and is not a folder; pick another path for the index")
    if text_index(encoder) and qdrant is not None:
        raise InvalidInputError(
            f"{encoder} keeps its own text index; the qdrant backend needs colqwen2 or colpali"
        )
    check_encoder_args(encoder, encoder_path)
    if qdrant is not None:
        qdrant.check_server()  # before the encoder loads
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(out)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.building.{os.getpid()}.", dir=out.parent))
    try:
        spec, enc = _build_into(
            staging,
            out,
            pages,
            encoder,
            encoder_path,
            options,
            StoreOptions(maxsim, bm25),
            ocr,
            qdrant,
            progress,
        )
        if replacing:
            _replace(staging, out)
        else:
            publish(staging, out, MANIFEST)
    except BaseException:
        drop_noted(staging)  # the Qdrant collection it was filling, if any
        shutil.rmtree(staging, ignore_errors=True)
        raise
    logger.debug("built %s index of %d pages at %s", spec.backend, len(pages), out)
    return _engine(out, spec, enc, INDEXES.get(spec.backend).open(out, spec, StoreOptions(maxsim, bm25)))


def _replace(staging: Path, out: Path) -> None:
    """Swap the finished index in ``staging`` for the one at ``out`` (two renames), keep the old
    folder's ``images`` (inline benchmark images the new index refers to), drop the rest."""
    old = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced.{os.getpid()}.", dir=out.parent))
    os.rename(out, old / "index")
    os.rename(staging, out)
    images = old / "index" / "images"
    if images.is_dir() and not (out / "images").exists():
        os.rename(images, out / "images")
    shutil.rmtree(old, ignore_errors=True)


def _build_into(
    staging: Path,
    out: Path,
    pages: Sequence[Page],
    encoder: str,
    encoder_path: str | Path,
    options: EncoderOptions | None,
    stores: StoreOptions,
    ocr: bool,
    qdrant: QdrantSpec | None,
    progress: Progress | None,
) -> tuple[IndexSpec, Encoder | None]:
    """Build the complete index for ``out`` in ``staging`` and close it; returns its spec and encoder."""
    if text_index(encoder):
        enc, spec = None, IndexSpec(encoder, "", encoder, ocr)
    else:
        enc = load_encoder(encoder, encoder_path, options)  # resolves the reference, with its own errors
        folder = _local_checkpoint(encoder_path, encoder)  # now local (a hub download is cached)
        if qdrant is not None and enc.kind != "multi":
            raise InvalidInputError(
                f"the qdrant backend needs a multi-vector encoder (colqwen2, colpali); {encoder} is "
                "single-vector"
            )
        backend = qdrant.backend if qdrant is not None else "maxsim" if enc.kind == "multi" else "dense"
        dim = int(enc.embed_queries(["dimension probe"])[0].shape[1])
        spec = IndexSpec(
            encoder,
            recorded_ref(encoder_path),
            backend,
            ocr,
            qdrant=qdrant,
            dim=dim,
            encoder_fingerprint=fingerprint(folder) if folder else "",
        )
    backend_hooks = INDEXES.get(spec.backend)
    index = backend_hooks.create(staging, spec, stores)
    try:
        write_manifest(staging, spec)  # a commit (BM25's new file folder) rewrites it
        _engine(staging, spec, enc, index).add(pages, progress=progress)
        backend_hooks.finish(index, spec)
    finally:
        close = getattr(index, "close", None)
        if close is not None:
            close()  # release files and locks before the folder is renamed (or removed)
    return read_spec(staging), enc


def open_index(
    root: str | Path,
    *,
    encoder_path: str | Path | None = None,
    options: EncoderOptions | None = None,
    maxsim: MaxSimOptions | None = None,
) -> Engine:
    """Open an index directory; ``encoder_path`` overrides the checkpoint recorded at build time
    (the same weights, moved: its fingerprint must match the one recorded, ``fingerprint``)."""
    path = Path(root)
    spec = read_spec(path)
    backend = INDEXES.get(spec.backend)
    index = backend.open(
        path, spec, StoreOptions(maxsim)
    )  # first: a missing store fails before a model loads
    if not backend.embeds:
        return _engine(path, spec, None, index)
    try:
        ref = _encoder_ref(path, spec, str(encoder_path or ""))
        enc = load_encoder(spec.encoder, ref, options)
        folder = _local_checkpoint(ref, spec.encoder) if spec.encoder_fingerprint else None
        if folder is not None:  # an index built before fingerprints has nothing to compare
            check_encoder(path, spec.encoder_path, spec.encoder_fingerprint, ref, folder)
    except BaseException:
        index.close()
        raise
    return _engine(path, spec, enc, index)


def _encoder_ref(root: Path, spec: IndexSpec, given: str) -> str:
    """The checkpoint to embed queries with: ``given``, or the recorded one while it exists."""
    recorded = Path(spec.encoder_path)  # a fingerprint says it was a folder when the index was built
    if not given and spec.encoder_fingerprint and recorded.is_absolute() and not recorded.exists():
        raise InvalidInputError(
            f"index {root} was built with encoder checkpoint {spec.encoder_path}, which no longer exists; "
            f"pass --encoder DIR (that checkpoint, moved), or rebuild the index"
        )
    return given or spec.encoder_path


def _local_checkpoint(ref: str | Path, encoder: str) -> Path | None:
    """The checkpoint folder ``ref`` names (a path, a hub id, ``tiny:ARCH``); None for a reference
    that is none of them, which an encoder registered by a user may read its own way."""
    text = str(ref).strip()
    is_ref = text.startswith(TINY_PREFIX) or parse_hub_id(text) is not None or looks_like_path(text)
    if not is_ref and not Path(text).expanduser().exists():
        return None
    return resolve_model_ref(text, f"{encoder} encoder")


def open_searcher(
    where: str, required: Collection[str] = (), key_policy: KeyPolicy | None = None
) -> Retriever:
    """Text-to-pages search at ``where``: a ``serve-index`` URL or an index directory.

    ``key_policy`` says who named a URL: by default a file (a recipe's ``method.index``), so the
    key in ``$EVIDRA_INDEX_API_KEY`` goes there only where ``EVIDRA_KEY_HOSTS`` allows
    (``evidra.safeio.keys``); a command-line ``--index`` passes ``KeyPolicy()``.

    An index directory must hold every page id in ``required`` (e.g. the gold pages a reward
    checks retrieval against); a URL is trusted, since a service cannot list its pages cheaply.
    The query encoder runs on the GPU in bfloat16 when one is present (the released ColQwen2 /
    ColPali dtype), else on the CPU in float32.
    """
    if where.startswith(("http://", "https://")):
        from evidra.retrieval.service.client import SearchClient

        return SearchClient(where, key_policy=key_policy or KeyPolicy.file("method.index"))
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
    store: VectorIndex | BM25Retriever = INDEXES.get(spec.backend).open(path, spec, StoreOptions())
    return store


def _joined(encoder: Encoder, index: VectorIndex) -> Retriever:
    from evidra.retrieval.interfaces import EncodedRetriever

    return EncodedRetriever(encoder, index)
