"""Interfaces of the retrieval engine: encoders, vector indexes and retrievers.

An ``Encoder`` turns pages and queries into embeddings; a ``VectorIndex`` stores page
embeddings and searches them; a ``Retriever`` answers text queries with ranked ``Hit`` lists
(``EncodedRetriever`` joins an encoder to an index; BM25 and hybrid fusion are retrievers on
their own). Every backend is one file, registered by name in ``ENCODERS``
(encoders) / ``stores.INDEXES`` (index backends).

Embeddings are always a list with one ``(L, D)`` tensor per item: ``L`` patch/token vectors
for multi-vector (late-interaction) encoders, ``L == 1`` for single-vector ones. Padding is
removed per item, so no zero vector ever takes part in a MaxSim.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry

if TYPE_CHECKING:
    from torch import Tensor

    from evidra.core.types import Page

EmbeddingKind = Literal["multi", "single"]
Exclude = Sequence[Collection[str]] | None  # one collection of page ids per query, or None


@dataclass(frozen=True)
class PageBatch:
    """Embedded pages to store: their ids, one ``(L, D)`` tensor each and their image paths."""

    page_ids: Sequence[str]
    embeddings: Sequence[Tensor]
    image_paths: Sequence[str] | None = None


@dataclass(frozen=True)
class Hit:
    """One retrieved page: its id, its score under the retriever, and its image (if known)."""

    page_id: str
    score: float
    image_path: str = ""


@dataclass(frozen=True)
class EncoderOptions:
    """How an encoder runs: items per forward pass, device and weight dtype."""

    batch_size: int = 8
    device: str = "cpu"
    dtype: str = "float32"  # float32 | bfloat16 | float16

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise InvalidInputError(f"EncoderOptions.batch_size must be >= 1, got {self.batch_size}")


@runtime_checkable
class Encoder(Protocol):
    """Embeds pages and queries into the same space."""

    @property
    def name(self) -> str: ...

    @property
    def kind(self) -> EmbeddingKind: ...

    def embed_pages(self, pages: Sequence[Page]) -> list[Tensor]:
        """One ``(L, D)`` float tensor per page, on CPU, padding removed."""
        ...

    def embed_queries(self, queries: Sequence[str]) -> list[Tensor]:
        """One ``(L, D)`` float tensor per query, on CPU, padding removed."""
        ...


@runtime_checkable
class VectorIndex(Protocol):
    """A persistent set of page embeddings with exact (or prefiltered) top-k search."""

    @property
    def kind(self) -> EmbeddingKind: ...

    def add(
        self, page_ids: Sequence[str], embeddings: Sequence[Tensor], image_paths: Sequence[str] | None = None
    ) -> None:
        """Add new pages; an id already present is an error (use ``update``)."""
        ...

    def update(
        self, page_ids: Sequence[str], embeddings: Sequence[Tensor], image_paths: Sequence[str] | None = None
    ) -> None:
        """Add pages, replacing those whose ids are already present."""
        ...

    def add_batches(self, batches: Iterable[PageBatch], *, replace: bool = False) -> int:
        """Store every batch (``replace``: updating pages already present); returns the page count.

        The embedded stores make all batches visible at once, or none if it fails or is killed;
        a Qdrant collection stores each batch as it comes.
        """
        ...

    def delete(self, page_ids: Sequence[str]) -> int:
        """Remove pages by id; returns how many were present."""
        ...

    def search(self, queries: Sequence[Tensor], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        """Top ``k`` pages per query embedding, skipping ids in ``exclude[i]`` for query ``i``."""
        ...

    def page_ids(self) -> list[str]: ...

    def __len__(self) -> int: ...

    def close(self) -> None:
        """Release files, locks and connections."""
        ...


@runtime_checkable
class Retriever(Protocol):
    """Answers text queries with ranked pages."""

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]: ...


@dataclass(frozen=True, eq=False)
class EncodedRetriever:
    """A ``Retriever`` made of an encoder (for the queries) and an index of page embeddings."""

    encoder: Encoder
    index: VectorIndex

    def __post_init__(self) -> None:
        if self.encoder.kind != self.index.kind:
            raise InvalidInputError(
                f"encoder {self.encoder.name!r} gives {self.encoder.kind}-vector embeddings but the "
                f"index holds {self.index.kind}-vector ones; build the index with the same encoder"
            )

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        return self.index.search(self.encoder.embed_queries(queries), k=k, exclude=exclude)


EncoderFactory = Callable[..., Encoder]
ENCODERS: Registry[EncoderFactory] = Registry("encoder")


def check_k(k: int) -> None:
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidInputError(f"k must be a positive integer, got {k!r}")


def check_exclude(exclude: Exclude, n_queries: int) -> list[Collection[str]]:
    """Normalise ``exclude`` to one collection per query."""
    if exclude is None:
        return [() for _ in range(n_queries)]
    if isinstance(exclude, (str, bytes)) or len(exclude) != n_queries:
        raise InvalidInputError(
            f"exclude must hold one collection of page ids per query ({n_queries}), got {exclude!r:.80}"
        )
    return list(exclude)
