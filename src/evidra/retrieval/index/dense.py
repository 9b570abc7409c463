"""Exact inner-product index for single-vector encoders (DSE / VisRAG-Ret / sentence embeddings).

Same on-disk format and crash-safety as ``MultiVectorIndex`` (``_shards``), with one vector per
page. Scores are ``<q, p>``; encoders normalise, so this is cosine similarity.

>>> index = DenseIndex.create("idx/", dim=64)                     # doctest: +SKIP
>>> index.add(["p1"], [torch.randn(1, 64)])                       # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.retrieval.index._common import ShardIndex, exclusion_mask, pick_device, top_hits
from evidra.retrieval.index._shards import PageRecord, ShardStore
from evidra.retrieval.interfaces import Exclude, Hit, check_exclude, check_k


class DenseIndex(ShardIndex):
    """One vector per page, exact top-k by inner product."""

    kind: Literal["single"] = "single"

    def __init__(self, store: ShardStore, *, device: str = "auto", verify: bool = True) -> None:
        self.store = store
        self.device = pick_device(device)
        self._verify = verify
        self._load()

    @classmethod
    def create(cls, path: str | Path, dim: int, *, device: str = "auto", encoder: str = "") -> DenseIndex:
        return cls(ShardStore.create(path, kind="single", dim=dim, extra={"encoder": encoder}), device=device)

    @classmethod
    def open(cls, path: str | Path, *, device: str = "auto", verify: bool = True) -> DenseIndex:
        store = ShardStore.open(path)
        if store.meta()["kind"] != "single":
            raise InvalidInputError(f"index {str(path)!r} is multi-vector; open it with MultiVectorIndex")
        return cls(store, device=device, verify=verify)

    def _load(self) -> None:
        shards = self.store.load_shards(verify=self._verify, mmap=False)
        recs = self.store.records()
        self._ids = [r.page_id for r in recs]
        self._images = [r.image_path for r in recs]
        self._row_of = {pid: i for i, pid in enumerate(self._ids)}
        rows = [shards[r.shard][r.offset] for r in recs]
        matrix = np.stack(rows) if rows else np.zeros((0, self.store.dim), dtype=np.float16)
        self._matrix = torch.from_numpy(matrix).to(self.device)  # (N, D) float16
        self._alive = torch.ones(len(self._ids), dtype=torch.bool)

    def _attach(self, records: Sequence[PageRecord], superseded: Sequence[str]) -> None:
        self._drop(superseded)
        if not records:
            return
        shards = {n: np.load(self.store.shard_path(n)) for n in dict.fromkeys(r.shard for r in records)}
        first = len(self._ids)
        self._ids += [r.page_id for r in records]
        self._images += [r.image_path for r in records]
        self._row_of.update({r.page_id: first + i for i, r in enumerate(records)})
        new = torch.from_numpy(np.stack([shards[r.shard][r.offset] for r in records])).to(
            self.device
        )  # (n, D)
        self._matrix = torch.cat([self._matrix, new])
        self._alive = torch.cat([self._alive, torch.ones(len(records), dtype=torch.bool)])

    def delete(self, page_ids: Sequence[str]) -> int:
        return len(self._delete(page_ids))

    def compact(self) -> None:
        self.store.compact()
        self._load()

    def search(self, queries: Sequence[Tensor], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        check_k(k)
        excl = check_exclude(exclude, len(queries))
        if not queries:
            return []
        qs = []
        for i, q in enumerate(queries):
            t = torch.as_tensor(q).reshape(-1, q.shape[-1]) if q.ndim else q
            if t.ndim != 2 or t.shape != (1, self.dim):
                raise InvalidInputError(f"query {i} must have shape (1, {self.dim}), got {tuple(q.shape)}")
            qs.append(t)
        q = torch.cat(qs).to(self.device, self._matrix.dtype)  # (Q, D)
        scores = (q @ self._matrix.T).float()  # (Q, N)
        scores = scores.masked_fill(~self._alive.to(scores.device).unsqueeze(0), float("-inf"))
        mask = exclusion_mask(excl, self._row_of, len(self._ids), scores.device)
        if mask is not None:
            scores = scores.masked_fill(mask, float("-inf"))
        return top_hits(scores, k, self._ids, self._images)
