"""The index backends an index directory can name (``IndexSpec.backend``), one registered entry each.

An ``IndexBackend`` gives the engine the hooks it needs: ``create`` a new store in a (staging)
folder, ``open`` an existing one, ``add`` pages (embedded by the encoder, or read as text for
BM25), ``commit`` after a change (BM25 writes a new file folder and the manifest naming it; the
vector stores commit their own batches) and ``finish`` a build once every page is in (a Qdrant
server's collection becomes visible under its alias). ``embeds`` says whether the backend needs
an encoder.

``qdrant`` is a Qdrant server or cluster (qdrant-client, ``QdrantSpec.url``); ``qdrant-edge`` is
Qdrant's engine embedded in the process (qdrant-edge), its shard a folder of the index
(``QdrantSpec.path``, a name inside it). ``evidra index build --backend qdrant`` picks the second
when no URL is given.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypedDict, TypeVar

from evidra.core.errors import CorpusError
from evidra.core.registry import Registry
from evidra.core.types import Page
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.index.qdrant_edge import EdgeQdrantIndex, shard_folder
from evidra.retrieval.interfaces import Encoder, PageBatch, VectorIndex
from evidra.retrieval.lifecycle.manifest import MANIFEST, IndexSpec, load_bm25, save_bm25
from evidra.retrieval.lifecycle.qdrant_build import QdrantSpec, check_target, publish_alias, stage_collection
from evidra.retrieval.ocr import page_text

if TYPE_CHECKING:
    from evidra.retrieval.index.qdrant import QdrantIndex

Progress = Callable[[int], None]  # called with the number of pages just embedded (bm25: read)


@dataclass(frozen=True)
class StoreOptions:
    """How stores are made and run: MaxSim search settings (device), BM25 parameters."""

    maxsim: MaxSimOptions | None = None
    bm25: BM25Params | None = None


@dataclass(frozen=True)
class AddRequest:
    """Pages to put into a store, and how."""

    pages: Sequence[Page]
    encoder: Encoder | None
    ocr: bool = False
    replace: bool = False
    batch_pages: int = 32
    progress: Progress | None = None


S = TypeVar("S", bound="VectorIndex | BM25Retriever")  # what a backend stores pages in
S_co = TypeVar("S_co", bound="VectorIndex | BM25Retriever", covariant=True)
S_contra = TypeVar("S_contra", bound="VectorIndex | BM25Retriever", contravariant=True)


class OpenFn(Protocol[S_co]):
    def __call__(self, root: Path, spec: IndexSpec, options: StoreOptions, /) -> S_co: ...


class AddFn(Protocol[S_contra]):
    def __call__(self, store: S_contra, request: AddRequest, /) -> None: ...


class CommitFn(Protocol[S_contra]):
    def __call__(self, root: Path, store: S_contra, /) -> None: ...


class FinishFn(Protocol[S_contra]):
    def __call__(self, store: S_contra, spec: IndexSpec, /) -> None: ...


def _nothing_to_finish(store: VectorIndex | BM25Retriever, spec: IndexSpec) -> None:
    """The store's pages are visible as soon as they are in."""


@dataclass(frozen=True)
class IndexBackend(Generic[S]):
    create: OpenFn[S]  # a new, empty store at root
    open: OpenFn[S]  # the store of an existing index
    add: AddFn[S]
    commit: CommitFn[S]  # after add or delete
    finish: FinishFn[S] = _nothing_to_finish  # after a build's last page, before the store closes
    embeds: bool = True  # pages go in as embeddings of the index's encoder


INDEXES: Registry[IndexBackend[Any]] = Registry("index backend")  # each backend its own store type


def text_index(encoder: str) -> bool:
    """Whether ``encoder`` names an index of the pages' text layer (``bm25``): a backend that embeds
    nothing, so it needs no encoder checkpoint and builds straight from the words."""
    return encoder in INDEXES and not INDEXES.get(encoder).embeds


def embedded(request: AddRequest) -> Iterator[PageBatch]:
    """The pages embedded ``batch_pages`` at a time."""
    assert request.encoder is not None
    pages, step = request.pages, request.batch_pages
    for start in range(0, len(pages), step):
        batch = pages[start : start + step]
        yield PageBatch(
            [p.id for p in batch], request.encoder.embed_pages(batch), [p.image_path for p in batch]
        )
        if request.progress is not None:  # the batch is stored (or staged) once the next one is asked for
            request.progress(len(batch))


def page_texts(pages: Sequence[Page], ocr: bool, progress: Progress | None) -> dict[str, str]:
    """Each page's text layer, or its OCR (slow) where ``ocr`` asks for it."""
    texts = {}
    for p in pages:
        texts[p.id] = page_text(p, ocr=ocr)
        if progress is not None:
            progress(1)
    return texts


def _add_vectors(store: VectorIndex, request: AddRequest) -> None:
    store.add_batches(embedded(request), replace=request.replace)


def _add_texts(store: BM25Retriever, request: AddRequest) -> None:
    texts = page_texts(request.pages, request.ocr, request.progress)
    store.add(texts, {p.id: p.image_path for p in request.pages}, replace=request.replace)


def _no_commit(root: Path, store: VectorIndex) -> None:
    """Vector stores commit their own batches."""


def _device(options: StoreOptions) -> str:
    return (options.maxsim or MaxSimOptions()).device


def _server(root: Path, spec: IndexSpec) -> QdrantSpec:
    """The server ``spec`` names; a local-mode folder (what qdrant-client embedded before Qdrant
    Edge did) is refused unread: qdrant-client unpickles what it stores there."""
    if spec.qdrant is None or spec.dim < 1:
        raise CorpusError(f"{root / MANIFEST} names the qdrant backend without its connection; rebuild it")
    if not spec.qdrant.url:
        raise CorpusError(
            f"{root / MANIFEST} names a qdrant-client local-mode folder ({spec.qdrant.path}), which evidra "
            "no longer opens (its storage unpickles what it reads); rebuild the index with "
            "`evidra index build --backend qdrant`, which embeds Qdrant Edge"
        )
    return spec.qdrant


def _create_qdrant(root: Path, spec: IndexSpec, options: StoreOptions) -> QdrantIndex:
    """A new collection, noted in the (staging) folder before it exists."""
    server = _server(root, spec)
    index = stage_collection(server, root).connect(spec.dim, create=True)
    try:
        check_target(index, server.collection, server.where)
    except BaseException:
        index.close()
        raise
    return index


def _open_qdrant(root: Path, spec: IndexSpec, options: StoreOptions) -> QdrantIndex:
    return _server(root, spec).connect(spec.dim, create=False)


def _publish_qdrant(store: QdrantIndex, spec: IndexSpec) -> None:
    """Every page is in: only now does the asked-for collection name show them."""
    assert spec.qdrant is not None
    publish_alias(store, spec.qdrant.collection, spec.qdrant.where)


class EdgeSearch(TypedDict):
    """How a Qdrant Edge shard searches (``EdgeQdrantIndex`` options)."""

    candidates: int
    pool_factor: int
    pooling: str


def _edge_shard(root: Path, spec: IndexSpec) -> tuple[Path, EdgeSearch]:
    """The shard folder ``spec`` names inside ``root``, and the search options to open it with."""
    if spec.qdrant is None or spec.dim < 1 or spec.qdrant.url:
        raise CorpusError(
            f"{root / MANIFEST} names the qdrant-edge backend without its shard folder; rebuild it"
        )
    q = spec.qdrant
    folder = shard_folder(root, q.path, f"qdrant.path in {root / MANIFEST}")
    return folder, EdgeSearch(candidates=q.candidates, pool_factor=q.pool_factor, pooling=q.pooling)


def _create_edge(root: Path, spec: IndexSpec, options: StoreOptions) -> EdgeQdrantIndex:
    folder, search = _edge_shard(root, spec)
    return EdgeQdrantIndex.create(folder, spec.dim, **search)


def _open_edge(root: Path, spec: IndexSpec, options: StoreOptions) -> EdgeQdrantIndex:
    folder, search = _edge_shard(root, spec)
    return EdgeQdrantIndex.open(folder, spec.dim, root=root, **search)


def _create_maxsim(root: Path, spec: IndexSpec, options: StoreOptions) -> MultiVectorIndex:
    return MultiVectorIndex.create(root, spec.dim, options=options.maxsim, encoder=spec.encoder)


INDEXES.add(
    "maxsim",
    IndexBackend(
        create=_create_maxsim,
        open=lambda root, spec, o: MultiVectorIndex.open(root, options=o.maxsim),
        add=_add_vectors,
        commit=_no_commit,
    ),
)
INDEXES.add(
    "dense",
    IndexBackend(
        create=lambda root, spec, o: DenseIndex.create(
            root, spec.dim, device=_device(o), encoder=spec.encoder
        ),
        open=lambda root, spec, o: DenseIndex.open(root, device=_device(o)),
        add=_add_vectors,
        commit=_no_commit,
    ),
)
INDEXES.add(
    "qdrant",
    IndexBackend(
        create=_create_qdrant,
        open=_open_qdrant,
        add=_add_vectors,
        commit=_no_commit,
        finish=_publish_qdrant,
    ),
)
INDEXES.add(
    "qdrant-edge", IndexBackend(create=_create_edge, open=_open_edge, add=_add_vectors, commit=_no_commit)
)
INDEXES.add(
    "bm25",
    IndexBackend(
        create=lambda root, spec, o: BM25Retriever.build({}, o.bm25 or BM25Params()),
        open=lambda root, spec, o: load_bm25(root, spec),
        add=_add_texts,
        commit=save_bm25,
        embeds=False,
    ),
)
