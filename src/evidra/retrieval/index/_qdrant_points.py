"""What the two Qdrant indexes share: point ids, the vectors stored per page, query checks,
payload filters and hits.

``QdrantIndex`` (qdrant-client: a server or cluster) and ``EdgeQdrantIndex`` (Qdrant Edge, the
engine embedded in the process) store a page the same way, so both build their points here:

* id: uuid5 of the page id;
* ``multi``: the page's vectors, fp16-rounded like the exact store's; ``pooled``: the same vectors
  pooled ``pool_factor`` to one (``"mean"``: consecutive runs, ``"clustered"``: k-means clusters
  of similar vectors);
* payload: the caller's fields, then ``page_id`` and ``image_path``.

Their filter classes are spelled alike (``Filter``, ``FieldCondition``, ``MatchValue``,
``MatchAny``) but are two engines' own classes, so ``payload_filter`` checks the terms and hands
them to the ``FilterBuilder`` each index gives it. What the two
indexes do alike around their engines' calls (``add``, ``add_batches``, ``page_ids``, whether a
page is stored) is ``PointStore``'s, over the one call each engine spells its own way.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Literal, TypeAlias, TypeVar

import numpy as np
import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.retrieval.index._common import check_embeddings
from evidra.retrieval.interfaces import Exclude, Hit, PageBatch, check_exclude, check_k
from evidra.retrieval.pooling import cluster_pool, mean_pool

Pooling = Literal["mean", "clustered"]
Scalar: TypeAlias = str | int | bool  # a payload value a filter matches
Payload: TypeAlias = dict[str, object]  # a point's payload: the engines store any JSON-like value
PointOffset: TypeAlias = int | str | uuid.UUID | None  # where a scroll resumes; None: the start or the end
FilterT = TypeVar("FilterT")
# an engine's filter from the (key, value) pairs a payload must equal and the page ids to skip
FilterBuilder: TypeAlias = Callable[[list[tuple[str, Scalar]], list[str]], FilterT]

_NAMESPACE = uuid.UUID("6f1c1c9e-4c1b-4f55-9d0e-2f1f3a0d7a11")


def point_id(page_id: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, page_id))


def check_pooling(pooling: str) -> Pooling:
    """``pooling`` if it names a pooling, else one line naming the two."""
    if pooling == "mean":
        return "mean"
    if pooling == "clustered":
        return "clustered"
    raise InvalidInputError(f"pooling {pooling!r}: use 'mean' or 'clustered'")


def page_vectors(
    arrays: Sequence[np.ndarray], pooling: Pooling, pool_factor: int
) -> list[tuple[Tensor, Tensor]]:
    """Per page: its full vectors ``(L, D)`` and the pooled ones ``(ceil(L/p), D)``, fp32."""
    fulls = [torch.from_numpy(arr).float() for arr in arrays]  # fp16-rounded like the exact store
    if pooling == "clustered":
        pools = cluster_pool(fulls, pool_factor)
    else:
        pools = [mean_pool(full, pool_factor) for full in fulls]
    return list(zip(fulls, pools, strict=True))


def payloads_of(
    page_ids: Sequence[str], image_paths: Sequence[str] | None, extra: Sequence[Mapping[str, object]] | None
) -> list[Payload]:
    """Each page's payload: the caller's fields, then ``page_id`` and ``image_path`` (which win)."""
    images = list(image_paths) if image_paths is not None else [""] * len(page_ids)
    more = list(extra) if extra is not None else [{}] * len(page_ids)
    if len(images) != len(page_ids) or len(more) != len(page_ids):
        raise InvalidInputError(
            f"got {len(page_ids)} page ids but {len(images)} image paths and {len(more)} payloads"
        )
    return [{**m, "page_id": p, "image_path": i} for p, i, m in zip(page_ids, images, more, strict=True)]


# a page as a point: its id, its named vectors (``multi``, ``pooled``) as nested lists, its payload
PagePoint = tuple[str, dict[str, list[list[float]]], Payload]


def query_filters(
    build: FilterBuilder[FilterT],
    queries: Sequence[Tensor],
    dim: int,
    k: int,
    exclude: Exclude,
    where: Mapping[str, object] | None,
) -> list[tuple[list[list[float]], FilterT | None]]:
    """Each query's vectors as nested lists and its ``payload_filter``, after checking ``k``,
    ``exclude`` and the queries."""
    check_k(k)
    excl = check_exclude(exclude, len(queries))
    check_queries(queries, dim)
    return [
        (q.float().tolist(), payload_filter(build, skip, where))
        for q, skip in zip(queries, excl, strict=True)
    ]


def check_queries(queries: Sequence[Tensor], dim: int) -> None:
    for i, q in enumerate(queries):
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != dim:
            raise InvalidInputError(f"query {i} must have shape (L >= 1, {dim}), got {tuple(q.shape)}")


def payload_filter(
    build: FilterBuilder[FilterT], skip: Collection[str], where: Mapping[str, object] | None
) -> FilterT | None:
    """Points whose payload equals every value of ``where`` and whose page is not in ``skip``, as
    ``build`` spells it for its engine; None when that is every point."""
    equal: list[tuple[str, Scalar]] = []
    for key, value in (where or {}).items():
        if not isinstance(key, str) or not isinstance(value, str | int | bool):
            raise InvalidInputError(
                f"where {key!r}: {value!r} is a {type(value).__name__}; filter on text, integers or booleans"
            )
        equal.append((key, value))
    if not equal and not skip:
        return None
    return build(equal, sorted(skip))


def hit_of(payload: Mapping[str, object] | None, score: float) -> Hit:
    payload = payload or {}
    return Hit(str(payload.get("page_id", "")), float(score), str(payload.get("image_path", "")))


class AddByUpdate(ABC):
    """What both Qdrant indexes do alike over their engines: ``add`` refuses pages already
    present, then updates; ``add_batches`` stores batch after batch; ``page_ids`` scrolls through
    every point; a page is present where its point is stored; pages become points alike."""

    dim: int
    pooling: Pooling
    pool_factor: int

    @abstractmethod
    def _stored(self, point_ids: list[str]) -> set[str]:
        """Which of ``point_ids`` are stored (one request)."""

    @abstractmethod
    def _scroll(self, offset: PointOffset) -> tuple[list[str], PointOffset]:
        """The page ids of up to 1,000 points from ``offset`` on, and the next offset (None at the end)."""

    @abstractmethod
    def update(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None = None,
        payloads: Sequence[Mapping[str, object]] | None = None,
    ) -> None: ...

    def __contains__(self, page_id: object) -> bool:
        return isinstance(page_id, str) and bool(self._present([page_id]))

    def _present(self, page_ids: Sequence[str]) -> list[str]:
        """The ids of ``page_ids`` already stored, in their order: one request, not one per id."""
        if not page_ids:
            return []
        stored = self._stored([point_id(p) for p in page_ids])
        return [p for p in page_ids if point_id(p) in stored]

    def page_ids(self) -> list[str]:
        out: list[str] = []
        offset: PointOffset = None
        while True:
            ids, offset = self._scroll(offset)
            out += ids
            if offset is None:
                return sorted(out)

    def _points(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None,
        payloads: Sequence[Mapping[str, object]] | None,
    ) -> list[PagePoint]:
        """The pages as points, after checking them (nested lists: both engines take them twice
        as fast as numpy arrays)."""
        arrays = check_embeddings(page_ids, embeddings, self.dim, single=False)
        fields = payloads_of(page_ids, image_paths, payloads)
        vectors = page_vectors(arrays, self.pooling, self.pool_factor)
        return [
            (point_id(pid), {"multi": full.tolist(), "pooled": pooled.tolist()}, payload)
            for pid, (full, pooled), payload in zip(page_ids, vectors, fields, strict=True)
        ]

    def _add_each(self, batches: Iterable[PageBatch], replace: bool) -> int:
        """Store each batch as it comes (with ``update`` where ``replace``); the pages stored."""
        n = 0
        for batch in batches:
            (self.update if replace else self.add)(batch.page_ids, batch.embeddings, batch.image_paths)
            n += len(batch.page_ids)
        return n

    def add(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None = None,
        payloads: Sequence[Mapping[str, object]] | None = None,
    ) -> None:
        present = self._present(page_ids)
        if present:
            raise InvalidInputError(
                f"pages already in the index: {present[:5]}; use update() to replace them"
            )
        self.update(page_ids, embeddings, image_paths, payloads)
