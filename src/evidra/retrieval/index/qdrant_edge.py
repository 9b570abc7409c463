"""Qdrant Edge: Qdrant's own engine inside this process, in a folder, without a server.

The embedded form of the ``qdrant`` backend (``evidra index build --backend qdrant`` without
``--qdrant-url``): one shard folder (``<index>/qdrant``) holding the points as ``QdrantIndex``
lays them out on a server (``_qdrant_points``): ``multi``, the full page vectors (MaxSim, fp16,
HNSW off), and ``pooled``, the prefetch vectors (MaxSim). A search prefetches ``candidates`` points
on ``pooled`` and re-ranks them by exact MaxSim on ``multi`` in one Qdrant query, as on a server;
``candidates=0`` scores ``multi`` exhaustively. Payload ``page_id`` (keyword-indexed) and
``image_path`` serve exclusions and ``where`` filters. Needs the ``qdrant`` extra (qdrant-edge-py)::

    with EdgeQdrantIndex.create("idx/qdrant", dim=128) as index:
        index.add(page_ids, embeddings, image_paths)
        hits = index.search(queries, k=5, where={"doc": "report.pdf"})

The shard's optimizer (segment merging, HNSW on ``pooled``) is never run: at 2k pages it took two
minutes and made prefetch no faster than the scan of the plain segment, which it replaces.

A shard folder is input like any other: the index folder names it by a relative name, which must
stay inside it, and every link in the shard must resolve inside it too, since the engine writes
there (its write-ahead log, flushed segments). The engine reads no code and no paths from it;
what it cannot read becomes one ``CorpusError``. One process at a time holds a shard (a lock on
its log).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path, PurePath
from typing import TYPE_CHECKING, Literal

from torch import Tensor

from evidra.core.errors import CorpusError, InvalidInputError, require
from evidra.retrieval.index._qdrant_points import (
    AddByUpdate,
    PointOffset,
    Pooling,
    Scalar,
    check_pooling,
    hit_of,
    point_id,
    query_filters,
)
from evidra.retrieval.interfaces import Exclude, Hit, PageBatch

if TYPE_CHECKING:
    import qdrant_edge

CONFIG = "edge_config.json"  # what marks a folder as a shard
MAX_CONFIG_BYTES = 1 << 20


def _need_edge() -> None:
    """Raise the one line naming the extra to install when Qdrant Edge is missing."""
    require("qdrant_edge", "qdrant")


@contextmanager
def _engine_errors(what: str) -> Iterator[None]:
    """The engine's failures as one line naming ``what`` (it raises bare ``Exception``s, and a
    Rust panic as a ``BaseException``)."""
    try:
        yield
    except (KeyboardInterrupt, SystemExit, GeneratorExit, InvalidInputError):
        raise
    except BaseException as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        reason = (lines[0] if lines else type(exc).__name__).removeprefix("Service runtime error: ")
        raise CorpusError(f"{what}: {reason[:300]}") from None


def shard_folder(root: Path, name: str, what: str) -> Path:
    """``root / name``, the shard an index folder names, or a ``CorpusError`` naming ``what`` if
    ``name`` (or a link on the way) leaves ``root``: a planted manifest cannot point the engine,
    which writes where it opens, at another folder."""
    pure = PurePath(name) if isinstance(name, str) else None
    if pure is None or not name or pure.is_absolute() or ".." in pure.parts or os.path.normpath(name) == ".":
        raise CorpusError(
            f"{what} names {name!r}, which is not a folder inside {root}; the index is damaged or was "
            "planted: rebuild it"
        )
    return root / name


def check_confined(folder: Path, root: Path) -> None:
    """Refuse a shard ``folder`` that is, or holds, a link resolving outside ``root``."""
    top = Path(os.path.realpath(root))
    if not Path(os.path.realpath(folder)).is_relative_to(top):
        raise CorpusError(f"the Qdrant Edge shard {folder} resolves outside {root}; rebuild the index")
    for here, dirs, files in os.walk(folder):
        for name in (*dirs, *files):
            path = Path(here) / name
            if path.is_symlink() and not Path(os.path.realpath(path)).is_relative_to(top):
                raise CorpusError(
                    f"{path} links outside {root}; the shard is damaged or was planted: rebuild the index"
                )


def check_layout(folder: Path, dim: int) -> None:
    """Refuse a shard whose ``CONFIG`` does not declare ``dim``-d ``multi`` and ``pooled`` MaxSim
    vectors (read under a size cap; the engine checks its segments against it when it loads)."""
    path = folder / CONFIG
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise ValueError(f"larger than {MAX_CONFIG_BYTES} bytes")
        vectors = json.loads(raw)["vectors"]
        sizes = {name: vectors[name]["size"] for name in ("multi", "pooled")}
        multivector = all(vectors[n].get("multivector_config") for n in ("multi", "pooled"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise CorpusError(
            f"{path} does not describe an evidra shard ({type(exc).__name__}: {reason}); rebuild the index"
        ) from None
    if not multivector:
        raise CorpusError(f"{path} does not describe an evidra shard (no multi-vectors); rebuild the index")
    if sizes != {"multi": dim, "pooled": dim}:
        raise CorpusError(
            f"the Qdrant Edge shard at {folder} holds {sizes['multi']}-d vectors, not {dim}-d; "
            "it was built with another encoder"
        )


def _config(dim: int, on_disk: bool) -> qdrant_edge.EdgeConfig:
    _need_edge()
    import qdrant_edge as qe

    maxsim = qe.MultiVectorConfig(qe.MultiVectorComparator.MaxSim)
    multi = qe.EdgeVectorParams(
        size=dim,
        distance=qe.Distance.Dot,
        multivector_config=maxsim,
        datatype=qe.VectorStorageDatatype.Float16,
        hnsw_config=qe.HnswIndexConfig(m=0, ef_construct=100, full_scan_threshold=10000),  # re-rank only
        memory=qe.Memory.Cold if on_disk else None,
    )
    pooled = qe.EdgeVectorParams(size=dim, distance=qe.Distance.Dot, multivector_config=maxsim)
    return qe.EdgeConfig(vectors={"multi": multi, "pooled": pooled})


class EdgeQdrantIndex(AddByUpdate):
    """A ``VectorIndex`` in a Qdrant Edge shard folder; see the module docstring."""

    kind: Literal["multi"] = "multi"

    def __init__(
        self,
        shard: qdrant_edge.EdgeShard,
        folder: Path,
        dim: int,
        *,
        pool_factor: int = 4,
        candidates: int = 200,
        pooling: Pooling = "mean",
    ) -> None:
        check_pooling(pooling)
        if candidates < 0 or pool_factor < 1:
            raise InvalidInputError("Qdrant candidates must be >= 0 and pool_factor >= 1")
        self.shard = shard
        self.folder = folder
        self.dim = dim
        self.pool_factor = pool_factor
        self.candidates = candidates
        self.pooling = pooling

    @classmethod
    def create(
        cls,
        folder: str | Path,
        dim: int,
        *,
        on_disk: bool = False,
        pool_factor: int = 4,
        candidates: int = 200,
        pooling: str = "mean",
    ) -> EdgeQdrantIndex:
        """A new, empty shard at ``folder`` (missing or empty), searched with ``pool_factor``,
        ``candidates`` and ``pooling``. ``on_disk`` leaves the full vectors on disk, read as needed."""
        path = Path(folder)
        chosen = check_pooling(pooling)
        if path.exists() and any(path.iterdir()):
            raise InvalidInputError(f"{path} is not empty; a new Qdrant Edge shard needs an empty folder")
        _need_edge()
        import qdrant_edge as qe

        with _engine_errors(f"cannot create a Qdrant Edge shard at {path}"):
            shard = qe.EdgeShard.create(str(path), _config(dim, on_disk))
            shard.update(qe.UpdateOperation.create_field_index("page_id", qe.PayloadSchemaType.Keyword))
        return cls(shard, path, dim, pool_factor=pool_factor, candidates=candidates, pooling=chosen)

    @classmethod
    def open(
        cls,
        folder: str | Path,
        dim: int,
        *,
        root: str | Path | None = None,
        pool_factor: int = 4,
        candidates: int = 200,
        pooling: str = "mean",
    ) -> EdgeQdrantIndex:
        """The shard at ``folder``, which must hold ``dim``-d ``multi`` and ``pooled`` vectors;
        with ``root``, every link in it must resolve inside ``root`` (``check_confined``)."""
        path = Path(folder)
        if not (path / CONFIG).is_file():
            raise CorpusError(
                f"no Qdrant Edge shard at {path} (no {CONFIG}); build it with "
                "`evidra index build --backend qdrant`"
            )
        check_confined(path, Path(root) if root is not None else path)
        check_layout(path, dim)
        _need_edge()
        import qdrant_edge as qe

        with _engine_errors(f"cannot open the Qdrant Edge shard at {path}"):
            shard = qe.EdgeShard.load(str(path))  # with no config: nothing is rewritten
        return cls(
            shard, path, dim, pool_factor=pool_factor, candidates=candidates, pooling=check_pooling(pooling)
        )

    def close(self) -> None:
        """Flush and release the shard (and its lock)."""
        with _engine_errors(f"cannot close the Qdrant Edge shard at {self.folder}"):
            self.shard.flush()
            self.shard.close()

    def __enter__(self) -> EdgeQdrantIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def update(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None = None,
        payloads: Sequence[Mapping[str, object]] | None = None,
    ) -> None:
        _need_edge()
        import qdrant_edge as qe

        pages = self._points(page_ids, embeddings, image_paths, payloads)
        points = [qe.Point(pid, dict(vectors), payload) for pid, vectors, payload in pages]
        if points:
            with _engine_errors(f"cannot write to the Qdrant Edge shard at {self.folder}"):
                self.shard.update(qe.UpdateOperation.upsert_points(points))

    def add_batches(self, batches: Iterable[PageBatch], *, replace: bool = False) -> int:
        """Store each batch as it comes, like a Qdrant server: a failed or killed call leaves the
        batches stored before it; adding the same pages again completes it."""
        n = self._add_each(batches, replace)
        with _engine_errors(f"cannot flush the Qdrant Edge shard at {self.folder}"):
            self.shard.flush()
        return n

    def delete(self, page_ids: Sequence[str]) -> int:
        _need_edge()
        import qdrant_edge as qe

        present = self._present(page_ids)
        if present:
            with _engine_errors(f"cannot delete from the Qdrant Edge shard at {self.folder}"):
                self.shard.update(qe.UpdateOperation.delete_points([point_id(p) for p in present]))
                self.shard.flush()
        return len(present)

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        _need_edge()
        import qdrant_edge as qe

        return int(self.shard.count(qe.CountRequest(exact=True)))

    def _stored(self, point_ids: list[str]) -> set[str]:
        found = self.shard.retrieve([*point_ids], with_payload=False, with_vector=False)
        return {str(record.id) for record in found}

    def _scroll(self, offset: PointOffset) -> tuple[list[str], PointOffset]:
        _need_edge()
        import qdrant_edge as qe

        fields = qe.PayloadSelector.Include(["page_id"])
        records, offset = self.shard.scroll(qe.ScrollRequest(offset=offset, limit=1000, with_payload=fields))
        return [str((r.payload or {}).get("page_id", "")) for r in records], offset

    def search(
        self,
        queries: Sequence[Tensor],
        k: int = 10,
        exclude: Exclude = None,
        where: Mapping[str, object] | None = None,
    ) -> list[list[Hit]]:
        """Top ``k`` per query; ``where`` keeps points whose payload equals every given value."""
        _need_edge()
        import qdrant_edge as qe

        requests = []
        for vec, flt in query_filters(_filter, queries, self.dim, k, exclude, where):
            prefetch = (
                [
                    qe.Prefetch(
                        limit=max(self.candidates, k), query=qe.Query.Nearest(vec, using="pooled"), filter=flt
                    )
                ]
                if self.candidates > 0
                else None
            )
            requests.append(
                qe.QueryRequest(
                    limit=k,
                    query=qe.Query.Nearest(vec, using="multi"),
                    prefetches=prefetch,
                    filter=flt,
                    with_payload=True,
                )
            )
        if not requests:
            return []
        with _engine_errors(f"cannot search the Qdrant Edge shard at {self.folder}"):
            results = self.shard.query_batch(qe.QueryBatchRequest(requests))
        return [[hit_of(p.payload, p.score) for p in points] for points in results]


def _filter(equal: list[tuple[str, Scalar]], skip: list[str]) -> qdrant_edge.Filter:
    """``payload_filter``'s terms as Qdrant Edge's filter."""
    import qdrant_edge as qe

    must: list[qdrant_edge.ConditionType] = [
        qe.FieldCondition(key=key, match=qe.MatchValue(value=value)) for key, value in equal
    ]
    must_not: list[qdrant_edge.ConditionType] = (
        [qe.FieldCondition(key="page_id", match=qe.MatchAny(any=skip))] if skip else []
    )
    return qe.Filter(must=must or None, must_not=must_not or None)
