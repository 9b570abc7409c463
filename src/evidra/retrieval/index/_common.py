"""Helpers shared by the embedded indexes: input checks, device choice, top-k to hits."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Iterable, Mapping, Sequence

import numpy as np
import torch
from torch import Tensor

from evidra.core.devices import resolve_device
from evidra.core.errors import InvalidInputError
from evidra.retrieval.index._shards import PageRecord, ShardStore
from evidra.retrieval.interfaces import Hit, PageBatch


def pick_device(device: str) -> torch.device:
    """``auto`` means the GPU when one is present, else the CPU."""
    return torch.device(resolve_device(device))


def check_embeddings(
    page_ids: Sequence[str], embeddings: Sequence[Tensor], dim: int, *, single: bool
) -> list[np.ndarray]:
    """Validate page embeddings and return them as float16 numpy arrays ``(L, D)``."""
    if isinstance(page_ids, str) or len(page_ids) != len(embeddings):
        raise InvalidInputError(f"got {len(page_ids)} page ids but {len(embeddings)} embeddings")
    if len(set(page_ids)) != len(page_ids):
        dup = sorted({p for p in page_ids if list(page_ids).count(p) > 1})
        raise InvalidInputError(f"duplicate page ids in one call: {dup[:5]}")
    out = []
    for pid, emb in zip(page_ids, embeddings, strict=True):
        if not pid or not isinstance(pid, str):
            raise InvalidInputError(f"page ids must be non-empty strings, got {pid!r}")
        t = torch.as_tensor(emb)
        if t.ndim == 1:
            t = t.unsqueeze(0)
        if t.ndim != 2 or t.shape[0] == 0 or t.shape[1] != dim:
            raise InvalidInputError(
                f"page {pid!r}: embedding must have shape (L >= 1, {dim}), got {tuple(t.shape)}"
            )
        if single and t.shape[0] != 1:
            raise InvalidInputError(
                f"page {pid!r}: a single-vector index takes (1, {dim}), got {tuple(t.shape)}"
            )
        if not bool(torch.isfinite(t).all()):
            raise InvalidInputError(f"page {pid!r}: embedding holds NaN or infinite values")
        out.append(t.detach().to("cpu", torch.float16).numpy())
    return out


def refuse_present(store: ShardStore, page_ids: Sequence[str]) -> None:
    """``add`` refuses pages the index already holds (``update`` replaces them)."""
    present = store.contains(page_ids)
    if present:
        raise InvalidInputError(f"pages already in the index: {present[:5]}; use update() to replace them")


class ShardWrites(ABC):
    """``add``/``update``/``add_batches`` of the shard-backed indexes: every batch of one call is
    written as its own shard and all become visible in one transaction (``_shards.ShardBatch``)."""

    store: ShardStore
    kind: str

    def add(
        self, page_ids: Sequence[str], embeddings: Sequence[Tensor], image_paths: Sequence[str] | None = None
    ) -> None:
        self.add_batches([PageBatch(page_ids, embeddings, image_paths)])

    def update(
        self, page_ids: Sequence[str], embeddings: Sequence[Tensor], image_paths: Sequence[str] | None = None
    ) -> None:
        self.add_batches([PageBatch(page_ids, embeddings, image_paths)], replace=True)

    def add_batches(self, batches: Iterable[PageBatch], *, replace: bool = False) -> int:
        """Store every batch, all or nothing; without ``replace`` a page already present is an error."""
        change = self.store.begin()
        superseded: list[str] = []
        try:
            for batch in batches:
                ids = list(batch.page_ids)
                if replace:
                    superseded += self.store.contains(ids)
                else:
                    refuse_present(self.store, ids)
                arrays, images = write_inputs(
                    ids, batch.embeddings, batch.image_paths, self.store.dim, single=self.kind == "single"
                )
                change.write(ids, arrays, images)
            records = change.commit(replace=superseded, meta=self._meta())
        except BaseException:
            change.discard()
            raise
        self._attach(records, superseded)
        return len(records)

    def _meta(self) -> dict[str, str]:
        """Metadata a write records in the same transaction (the scoring dtype, for one)."""
        return {}

    @abstractmethod
    def _attach(self, records: Sequence[PageRecord], superseded: Sequence[str]) -> None:
        """Make committed ``records`` searchable in memory, after dropping the ``superseded`` ids."""


class ShardIndex(ShardWrites):
    """An index held in shards and searched from memory: which row holds each live page
    (``_row_of``), which rows are alive (``_alive``, ``(N,)`` bool), and deletes that clear both."""

    _row_of: dict[str, int]
    _alive: Tensor

    @property
    def dim(self) -> int:
        return self.store.dim

    def __len__(self) -> int:
        return len(self._row_of)

    def __contains__(self, page_id: object) -> bool:
        return page_id in self._row_of

    def page_ids(self) -> list[str]:
        return sorted(self._row_of)

    def close(self) -> None:
        self.store.close()

    def _drop(self, page_ids: Iterable[str]) -> None:
        """Take ``page_ids`` (all present) out of the search; their rows stay, dead."""
        for pid in page_ids:
            self._alive[self._row_of.pop(pid)] = False

    def _delete(self, page_ids: Sequence[str]) -> list[str]:
        """Delete the stored ones of ``page_ids`` from disk and the search; the ids deleted."""
        present = self.store.contains(page_ids)
        self.store.delete_pages(present)
        self._drop(present)
        return present


def write_inputs(
    page_ids: Sequence[str],
    embeddings: Sequence[Tensor],
    image_paths: Sequence[str] | None,
    dim: int,
    *,
    single: bool,
) -> tuple[list[np.ndarray], list[str]]:
    """Checked float16 arrays and their image paths (``""`` when none are given)."""
    arrays = check_embeddings(page_ids, embeddings, dim, single=single)
    images = list(image_paths) if image_paths is not None else [""] * len(arrays)
    if len(images) != len(arrays):
        raise InvalidInputError(f"got {len(arrays)} pages but {len(images)} image paths")
    return arrays, images


def exclusion_mask(
    exclude: Sequence[Collection[str]], row_of: Mapping[str, int], n_rows: int, device: torch.device
) -> Tensor | None:
    """``(Q, N)`` True where query ``i`` must skip row ``j``; None when nothing is excluded."""
    pairs = [(i, row_of[pid]) for i, ids in enumerate(exclude) for pid in ids if pid in row_of]
    if not pairs:
        return None
    mask = torch.zeros(len(exclude), n_rows, dtype=torch.bool)
    idx = torch.tensor(pairs, dtype=torch.int64)
    mask[idx[:, 0], idx[:, 1]] = True
    return mask.to(device)


def top_hits(scores: Tensor, k: int, ids: Sequence[str], images: Sequence[str]) -> list[list[Hit]]:
    """Top ``k`` finite scores per row of ``(Q, N)`` as hits, best first (ties: lower row first)."""
    if scores.shape[1] == 0:
        return [[] for _ in range(scores.shape[0])]
    values, rows = scores.float().cpu().topk(min(k, scores.shape[1]), dim=1, sorted=True)
    out = []
    for vals, rs in zip(values.tolist(), rows.tolist(), strict=True):
        out.append(
            [Hit(ids[r], float(v), images[r]) for v, r in zip(vals, rs, strict=True) if v != float("-inf")]
        )
    return out
