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
``MatchAny``), so ``payload_filter`` builds either from the module it is given.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Literal

import numpy as np
import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.retrieval.interfaces import Hit
from evidra.retrieval.pooling import cluster_pool, mean_pool

Pooling = Literal["mean", "clustered"]

_NAMESPACE = uuid.UUID("6f1c1c9e-4c1b-4f55-9d0e-2f1f3a0d7a11")


def point_id(page_id: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, page_id))


def check_pooling(pooling: str) -> None:
    if pooling not in ("mean", "clustered"):
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
    page_ids: Sequence[str], image_paths: Sequence[str] | None, extra: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]]:
    """Each page's payload: the caller's fields, then ``page_id`` and ``image_path`` (which win)."""
    images = list(image_paths) if image_paths is not None else [""] * len(page_ids)
    more = list(extra) if extra is not None else [{}] * len(page_ids)
    if len(images) != len(page_ids) or len(more) != len(page_ids):
        raise InvalidInputError(
            f"got {len(page_ids)} page ids but {len(images)} image paths and {len(more)} payloads"
        )
    return [{**m, "page_id": p, "image_path": i} for p, i, m in zip(page_ids, images, more, strict=True)]


def check_queries(queries: Sequence[Tensor], dim: int) -> None:
    for i, q in enumerate(queries):
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != dim:
            raise InvalidInputError(f"query {i} must have shape (L >= 1, {dim}), got {tuple(q.shape)}")


def payload_filter(models: Any, skip: Collection[str], where: Mapping[str, Any] | None) -> Any:
    """Points whose payload equals every value of ``where`` and whose page is not in ``skip``;
    None when that is every point. ``models`` is ``qdrant_client.models`` or ``qdrant_edge``."""
    for key, value in (where or {}).items():
        if not isinstance(key, str) or not isinstance(value, str | int | bool):
            raise InvalidInputError(
                f"where {key!r}: {value!r} is a {type(value).__name__}; filter on text, integers or booleans"
            )
    must: list[Any] = [
        models.FieldCondition(key=key, match=models.MatchValue(value=value))
        for key, value in (where or {}).items()
    ]
    must_not: list[Any] = (
        [models.FieldCondition(key="page_id", match=models.MatchAny(any=sorted(skip)))] if skip else []
    )
    if not must and not must_not:
        return None
    return models.Filter(must=must or None, must_not=must_not or None)


def hit_of(payload: Mapping[str, Any] | None, score: float) -> Hit:
    payload = payload or {}
    return Hit(str(payload.get("page_id", "")), float(score), str(payload.get("image_path", "")))


class AddByUpdate(ABC):
    """``add`` of both Qdrant indexes: refuse pages already present, then ``update``."""

    @abstractmethod
    def _present(self, page_ids: Sequence[str]) -> list[str]: ...

    @abstractmethod
    def update(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None = None,
        payloads: Sequence[Mapping[str, Any]] | None = None,
    ) -> None: ...

    def add(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None = None,
        payloads: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        present = self._present(page_ids)
        if present:
            raise InvalidInputError(
                f"pages already in the index: {present[:5]}; use update() to replace them"
            )
        self.update(page_ids, embeddings, image_paths, payloads)
