"""The embedded default index: exact MaxSim over fp16 multi-vector shards (torch, GPU if present).

Scoring runs in the dtype ``MaxSimOptions.compute_dtype`` names; ``auto`` takes the fastest one
this machine has that keeps search exact (``evidra.retrieval.kernels.compute_dtype``: bf16 on
CPUs with AVX-512 bf16 or AMX, fp32 on CPUs with neither, fp16 on GPU). bf16 keeps 8 significant
bits, so scores
move by up to ~0.01 and near-tied pages swap (top-10 agreement with fp32 0.98 on the benchmark's
pages); the best ``k + rescore`` pages per query by bf16 are therefore re-scored in fp32 from the
fp16 shards, which restored agreement 1.000, and auto never picks bf16 when ``rescore`` is 0.

What the in-memory blocks are held in is a separate choice, ``MaxSimOptions.storage_dtype``:
``auto`` keeps them 16-bit everywhere (the compute dtype where that is 16-bit, else fp16, widened
to fp32 block by block into one reused buffer while scoring), so a CPU without fast 16-bit GEMMs
holds the same memory as one with them; ``float32`` doubles the memory to skip the widening. The
index records both under the metadata keys ``compute_dtype`` and ``storage_dtype``, and the
MaxSim kernel, which decides the blocks' layout in memory, under ``maxsim_kernel``. Opened with
``auto`` for either, an index scores with the compute dtype and kernel it recorded wherever they
can run on this machine (``_dtype_for``, ``_kernel_for``): the same arithmetic as when it was
written, so reopening it does not move a score; where they cannot, ``auto`` chooses afresh and says
so in one log line. Name a dtype or kernel in ``MaxSimOptions`` to choose another.

Exact search scores every live page (``evidra.retrieval.kernels.maxsim``), on CUDA by default with one fused
Triton kernel that never writes the similarity matrix (``MaxSimOptions.kernel``,
``evidra.retrieval.kernels.choice``); with ``prefilter="pooled"`` a
first stage scores mean-pooled vectors (``pool_factor`` consecutive patches per vector) held in
memory (``"clustered"``: the same number of vectors, means of k-means clusters of similar patches
wherever they sit; ``"signbits"``: one bit per dimension, 16x less than fp16, scored asymmetrically),
keeps ``candidates`` pages per query and re-ranks them with exact MaxSim over the full vectors,
read from memory-mapped shards. That trades a little recall for ``pool_factor`` x less memory.

>>> index = MultiVectorIndex.create("idx/", dim=128)                        # doctest: +SKIP
>>> index.add(["p1", "p2"], [torch.randn(700, 128), torch.randn(760, 128)])  # doctest: +SKIP
>>> index.search([torch.randn(20, 128)], k=1, exclude=[{"p1"}])             # doctest: +SKIP
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError
from evidra.retrieval.index._common import ShardIndex, exclusion_mask, pick_device, top_hits
from evidra.retrieval.index._shards import PageRecord, ShardStore
from evidra.retrieval.interfaces import Exclude, Hit, check_exclude, check_k
from evidra.retrieval.kernels import choice as kernels
from evidra.retrieval.kernels import compute_dtype as compute
from evidra.retrieval.kernels.maxsim import Block, build_blocks, pack_signs
from evidra.retrieval.pooling import cluster_pool, mean_pool

logger = logging.getLogger(__name__)

PREFILTERS = ("none", "pooled", "clustered", "signbits")


@dataclass(frozen=True)
class MaxSimOptions:
    """Search settings (not persisted: choose them per process)."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    compute_dtype: compute.ComputeDtype = "auto"  # auto: the fastest exact one here (module docstring)
    storage_dtype: compute.StorageDtype = "auto"  # auto: 16-bit, widened per block where scored in fp32
    kernel: kernels.KernelName = "auto"  # auto: a fused kernel where one runs (kernels module), else torch
    block_tokens: int = 16384  # page vectors per scoring block
    max_elements: int = 1 << 25  # bound on one similarity matrix (Q tokens x block tokens)
    prefilter: Literal["none", "pooled", "clustered", "signbits"] = "none"
    pool_factor: int = 4
    candidates: int = 256  # pages per query re-ranked exactly after the pooled stage
    rescore: int = 32  # bf16 scoring: the best k + rescore pages per query are re-scored in fp32
    compact_at: float = 0.5  # compact on delete once this fraction of stored vectors is dead
    verify: bool = True  # check shard checksums on open

    def __post_init__(self) -> None:
        compute.check_name(self.compute_dtype)
        compute.check_storage(self.storage_dtype)
        kernels.check_name(self.kernel)
        if self.prefilter not in PREFILTERS:
            raise InvalidInputError(f"prefilter {self.prefilter!r}: use one of {', '.join(PREFILTERS)}")
        if self.pool_factor < 1 or self.candidates < 1 or self.block_tokens < 1:
            raise InvalidInputError("pool_factor, candidates and block_tokens must all be >= 1")
        if self.rescore < 0:
            raise InvalidInputError(f"rescore must be >= 0 (0: no fp32 re-scoring), got {self.rescore}")


class MultiVectorIndex(ShardIndex):
    """Late-interaction index; see the module docstring."""

    kind: Literal["multi"] = "multi"

    def __init__(self, store: ShardStore, options: MaxSimOptions) -> None:
        self.store = store
        self.options = options
        self.device = pick_device(options.device)
        recorded = store.meta()  # an index written before scores as it did then (module docstring)
        self.compute_dtype = _dtype_for(options, self.device, recorded.get("compute_dtype", ""))
        self._dtype = compute.DTYPES[self.compute_dtype]
        self.storage_dtype = compute.storage_for(options.storage_dtype, self.compute_dtype)
        self._held = compute.DTYPES[self.storage_dtype]
        self.kernel = _kernel_for(options, self.device, self.compute_dtype, recorded)
        self._score = kernels.KERNELS.get(self.kernel)
        logger.debug(
            "exact MaxSim on %s: %s kernel, %s held in %s",
            self.device,
            self.kernel,
            self.compute_dtype,
            self.storage_dtype,
        )
        self._load()

    @classmethod
    def create(
        cls, path: str | Path, dim: int, *, options: MaxSimOptions | None = None, encoder: str = ""
    ) -> MultiVectorIndex:
        index = cls(
            ShardStore.create(path, kind="multi", dim=dim, extra={"encoder": encoder}),
            options or MaxSimOptions(),
        )
        for key, value in index._meta().items():
            index.store.set_meta(key, value)
        return index

    @classmethod
    def open(cls, path: str | Path, *, options: MaxSimOptions | None = None) -> MultiVectorIndex:
        store = ShardStore.open(path)
        if store.meta()["kind"] != "multi":
            raise InvalidInputError(f"index {str(path)!r} is single-vector; open it with DenseIndex")
        return cls(store, options or MaxSimOptions())

    # -- state ---------------------------------------------------------------------------------

    def _load(self) -> None:
        self._shards = self.store.load_shards(verify=self.options.verify)
        self._ids: list[str] = []
        self._images: list[str] = []
        self._views: list[np.ndarray] = []  # per row: (L, D) float16 view into a shard
        self._row_of: dict[str, int] = {}
        self._alive = torch.zeros(0, dtype=torch.bool)
        self._blocks: list[Block] = []
        recs = self.store.records()
        self._append(
            [r.page_id for r in recs],
            [self._shards[r.shard][r.offset : r.offset + r.length] for r in recs],
            [r.image_path for r in recs],
        )

    def _append(self, ids: Sequence[str], views: Sequence[np.ndarray], images: Sequence[str]) -> None:
        first = len(self._ids)
        rows = list(range(first, first + len(ids)))
        self._ids += ids
        self._images += images
        self._views += views
        self._row_of.update({pid: r for pid, r in zip(ids, rows, strict=True)})
        self._alive = torch.cat([self._alive, torch.ones(len(ids), dtype=torch.bool)])
        if not ids:
            return
        self._blocks += self._build(views, rows)
        if len(self._blocks) > 2 * self._ideal_blocks() + 8:  # many small adds: re-pack the live rows
            live = [r for r in range(len(self._ids)) if bool(self._alive[r])]
            self._blocks = self._build([self._views[r] for r in live], live)

    def _build(self, views: Sequence[np.ndarray], rows: Sequence[int]) -> list[Block]:
        """First-stage blocks of ``rows``: full vectors, pooled vectors or sign-bit codes."""
        dtype = self._held
        if self.options.prefilter == "pooled":
            pages = [mean_pool(_tensor(v), self.options.pool_factor) for v in views]
        elif self.options.prefilter == "clustered":
            pages = cluster_pool([_tensor(v) for v in views], self.options.pool_factor)
        elif self.options.prefilter == "signbits":
            pages, dtype = [pack_signs(_tensor(v)) for v in views], torch.uint8
        else:
            pages = [_tensor(v) for v in views]
        blocks = build_blocks(
            pages, rows, max_tokens=self.options.block_tokens, dtype=dtype, device=self.device
        )
        return kernels.hold(self.kernel, blocks, self._dtype)  # the layout the kernel reads fastest

    def _ideal_blocks(self) -> int:
        vectors = sum(int(b.lengths.sum()) for b in self._blocks)  # real ones: no filler, no tiling
        return -(-vectors // self.options.block_tokens)

    def image_path(self, page_id: str) -> str:
        return self._images[self._row_of[page_id]]

    def memory_bytes(self) -> int:
        """Bytes of vectors held in (device) memory for scoring: blocks only, not mmapped shards."""
        return sum(b.vectors.numel() * b.vectors.element_size() for b in self._blocks)

    # -- writing -------------------------------------------------------------------------------

    def _meta(self) -> dict[str, str]:
        # the kernel decides how blocks are held in memory (kernels.hold): tiled for avx512, rounded
        # up to 16 vectors for amx, as built for torch and triton
        return {
            "compute_dtype": self.compute_dtype,
            "storage_dtype": self.storage_dtype,
            "maxsim_kernel": self.kernel,
        }

    def _attach(self, records: Sequence[PageRecord], superseded: Sequence[str]) -> None:
        self._drop(superseded)
        for name in dict.fromkeys(r.shard for r in records):
            self._shards[name] = np.load(self.store.shard_path(name), mmap_mode="r")
        views = [self._shards[r.shard][r.offset : r.offset + r.length] for r in records]
        self._append([r.page_id for r in records], views, [r.image_path for r in records])

    def delete(self, page_ids: Sequence[str]) -> int:
        present = self._delete(page_ids)
        if present and self.store.dead_fraction() > self.options.compact_at:
            self.compact()
        return len(present)

    def compact(self) -> None:
        """Drop deleted vectors from disk and rebuild the in-memory blocks."""
        self._blocks = []
        self._shards = {}
        self._views = []
        self.store.compact()
        self._load()

    # -- search --------------------------------------------------------------------------------

    def search(self, queries: Sequence[Tensor], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        check_k(k)
        excl = check_exclude(exclude, len(queries))
        queries = [self._check_query(i, q) for i, q in enumerate(queries)]
        if not queries:
            return []
        scores = self._score(
            queries, self._blocks, len(self._ids), max_elements=self.options.max_elements, dtype=self._dtype
        )
        scores = self._mask(scores, excl)  # (Q, N)
        if self.options.prefilter != "none":
            scores = self._rerank(queries, scores, self.options.candidates, self._dtype)
        if self._dtype == torch.bfloat16 and self.options.rescore:
            scores = self._rerank(queries, scores, k + self.options.rescore, torch.float32)
        return top_hits(scores, k, self._ids, self._images)

    def _check_query(self, i: int, query: Tensor) -> Tensor:
        q = torch.as_tensor(query)
        if q.ndim != 2 or q.shape[0] == 0 or q.shape[1] != self.dim:
            raise InvalidInputError(f"query {i} must have shape (L >= 1, {self.dim}), got {tuple(q.shape)}")
        return q

    def _mask(self, scores: Tensor, exclude: Sequence[Sequence[str] | object]) -> Tensor:
        scores = scores.masked_fill(~self._alive.to(scores.device).unsqueeze(0), float("-inf"))
        mask = exclusion_mask(exclude, self._row_of, len(self._ids), scores.device)  # type: ignore[arg-type]
        return scores if mask is None else scores.masked_fill(mask, float("-inf"))

    def _rerank(self, queries: Sequence[Tensor], first: Tensor, n_cand: int, dtype: torch.dtype) -> Tensor:
        """Exact MaxSim in ``dtype`` over each query's ``n_cand`` best pages by ``first`` (the
        prefilter's scores, or bf16 scores to re-score in fp32); other pages score ``-inf``.

        Two ways to do it: score the whole batch against the union of all candidates (pages are
        copied out of the shards once, but every query scores every page of the union), or each
        query against its own candidates (less compute, more copying). With 32 queries x 256
        candidates on 10k pages the union covers most of the corpus, which would undo the
        prefilter; on 1k pages the union is cheaper. We pick by a rough cost model in which
        scoring one page for one query costs ``_SCORE_PER_COPY`` times copying it. Where the kernel
        reads the pages in place from the shards (fp32 on the AVX-512 kernel) nothing is copied, and
        each query scores its own candidates, the queries side by side on the threads.
        """
        n_cand = min(n_cand, first.shape[1])
        values, rows = first.topk(n_cand, dim=1)  # (Q, C)
        valid = values > float("-inf")
        cands = [rows[i][valid[i]].tolist() for i in range(len(queries))]
        in_place = self._in_place_each(queries, cands, dtype)
        if in_place is not None:
            out = torch.full_like(first, float("-inf"))  # (Q, N)
            for i, scores in enumerate(in_place):
                out[i, cands[i]] = scores.to(out.device)
            return out
        union = sorted(set(rows[valid].tolist()))
        q = len(queries)
        if len(union) * (1 + q * _SCORE_PER_COPY) <= int(valid.sum()) * (1 + _SCORE_PER_COPY):
            keep = torch.zeros_like(first, dtype=torch.bool).scatter_(1, rows, valid)
            exact = self._exact(queries, union, dtype)
            return exact.masked_fill(~keep.to(exact.device), float("-inf"))
        out = torch.full_like(first, float("-inf"))  # (Q, N)
        for i, query in enumerate(queries):
            if cands[i]:
                out[i] = self._exact([query], cands[i], dtype)[0]
        return out

    def _in_place_each(
        self, queries: Sequence[Tensor], cands: Sequence[Sequence[int]], dtype: torch.dtype
    ) -> list[Tensor] | None:
        """Each query's exact MaxSim in ``dtype`` against its ``cands`` rows, read in place from the
        shards, ``(C_i,)`` each; None where the kernel cannot (then pages are copied into blocks)."""
        if self.device.type != "cpu":
            return None
        pages = [[_tensor(self._views[r]) for r in rows] for rows in cands]
        return kernels.score_each_in_place(self.kernel, queries, pages, dtype)

    def _exact(self, queries: Sequence[Tensor], rows: Sequence[int], dtype: torch.dtype) -> Tensor:
        """Exact MaxSim of ``queries`` against the full vectors of ``rows``: ``(Q, N)``."""
        pages = [_tensor(self._views[r]) for r in rows]
        if self.device.type == "cpu":
            scores = kernels.score_in_place(self.kernel, queries, pages, rows, len(self._ids), dtype)
            if scores is not None:
                return scores
        blocks = build_blocks(
            pages, rows, max_tokens=self.options.block_tokens, dtype=dtype, device=self.device
        )
        return self._score(
            queries, blocks, len(self._ids), max_elements=self.options.max_elements, dtype=dtype
        )


def _dtype_for(options: MaxSimOptions, device: torch.device, recorded: str) -> str:
    """The compute dtype: ``options``' own, or for ``auto`` the ``recorded`` one (an index written
    before) where ``auto`` may pick it on ``device``, else ``auto``'s choice here."""
    # without the fp32 re-score, bf16 does not rank like fp32: auto must not pick it
    unfit = () if options.rescore else ("bfloat16",)
    if options.compute_dtype != "auto" or not recorded:
        return compute.resolve(options.compute_dtype, device, exclude=unfit)
    if recorded in compute.candidates(device) and recorded not in unfit:
        return recorded
    chosen = compute.resolve("auto", device, exclude=unfit)
    logger.info(
        "the index was written scoring MaxSim in %r, which auto cannot pick on %s%s: it scores in %s",
        recorded[:40],  # metadata is read from disk: never a whole hostile value in the log
        device,
        " without the fp32 re-score" if recorded in unfit else "",
        chosen,
    )
    return chosen


def _kernel_for(options: MaxSimOptions, device: torch.device, dtype: str, recorded: dict[str, str]) -> str:
    """The MaxSim kernel: ``options``' own, or for ``auto`` the one the index recorded with the
    same compute dtype where it can score here (``kernels.reusable``), else ``auto``'s choice."""
    name = recorded.get("maxsim_kernel", "")
    if options.kernel != "auto" or not name or recorded.get("compute_dtype") != dtype:
        return kernels.resolve(options.kernel, device, compute.DTYPES[dtype])
    if kernels.reusable(name, device, compute.DTYPES[dtype]):
        return name
    chosen = kernels.resolve("auto", device, compute.DTYPES[dtype])
    logger.info(
        "the index was written scoring MaxSim with the %r kernel, which cannot score %s on %s here: "
        "it scores with %r",
        name[:40],
        dtype,
        device,
        chosen,
    )
    return chosen


_SCORE_PER_COPY = (
    0.15  # measured on CPU: ~2.6 us to score a 256x128 page for 20 query tokens vs ~20 us to copy it
)


def _tensor(view: np.ndarray) -> Tensor:
    """A page's vectors as a tensor sharing the (read-only) shard memory; only ever copied from."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # "non-writable NumPy array": we never write
        return torch.from_numpy(view)
