"""Qdrant as the scale-out index: native multi-vector MaxSim, pooled prefetch, payload filters.

Each page is one point (id = uuid5 of the page id) with two named vectors:

* ``multi``  - the full page multi-vector, ``MultiVectorComparator.MAX_SIM``, HNSW off (``m=0``):
  only ever used to re-rank, so building a graph over it would be wasted (qdrant#5702).
* ``pooled`` - the page's vectors pooled ``pool_factor`` to one (``pooling="mean"``: consecutive
  runs; ``"clustered"``: k-means clusters of similar vectors, ``pooling.cluster_pool``), MAX_SIM, HNSW:
  the prefetch stage. One ``query_points`` call prefetches ``candidates`` points on ``pooled`` and
  re-ranks them with exact MaxSim on ``multi`` (Qdrant's ColPali recipe; keep ``candidates`` at
  100-200, qdrant#7888). ``candidates=0`` searches ``multi`` exhaustively instead.

Payload ``page_id`` / ``image_path`` (keyword-indexed ``page_id``) serve exclusions and filters.
Points are laid out as ``EdgeQdrantIndex`` lays them out (``_qdrant_points``).

Pointing it at a server (optional extra ``evidra[qdrant]``)::

    docker run -p 6333:6333 -p 6334:6334 qdrant/qdrant
    index = QdrantIndex.connect(dim=128, url="http://localhost:6333", collection="pages")
    index = QdrantIndex.connect(dim=128, url="https://xyz.cloud.qdrant.io", api_key="...", prefer_grpc=True)

Without a server, ``EdgeQdrantIndex`` (``qdrant_edge``) runs Qdrant's own engine in the process;
index folders use it. ``QdrantIndex.connect(dim=128, location=":memory:")`` (or ``path="dir/"``)
still runs qdrant-client's pure-Python local mode, the stand-in for a server in tests: exact but
numpy/float64, 9x slower than Qdrant Edge per query at 10k pages (``docs/retrieval.md``),
and its ``path`` storage unpickles what it reads, so never point it at a folder you did not write.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from torch import Tensor

from evidra.core.errors import CorpusError, require
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
    from qdrant_client import QdrantClient, models

__all__ = ["QdrantIndex", "check_server", "point_id"]


def _reason(exc: BaseException) -> str:
    """One line saying why a request failed (gRPC errors print a multi-line report)."""
    details = getattr(exc, "details", None)
    text = details() if callable(details) else str(exc)
    lines = [line.strip() for line in str(text).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _collection_exists(client: QdrantClient, collection: str, where: str, *, remote: bool) -> bool:
    """The first request to the server; failing, it names the server and the way out."""
    try:
        return bool(client.collection_exists(collection))
    except Exception as exc:  # httpx, gRPC and HTTP status errors differ; all mean "cannot use it"
        client.close()
        if not remote:
            raise CorpusError(f"cannot open the Qdrant local-mode store at {where}: {_reason(exc)}") from exc
        raise CorpusError(
            f"cannot reach a Qdrant server at {where} ({_reason(exc)}); start the server, correct the "
            "URL (--qdrant-url; API key from $QDRANT_API_KEY), or leave --qdrant-url out to embed Qdrant Edge"
        ) from exc


def check_server(url: str, *, api_key: str | None = None, prefer_grpc: bool = False) -> None:
    """Raise ``CorpusError`` in one line unless a Qdrant server answers at ``url``.

    Cheap enough to run before an encoder loads, so a wrong URL fails in a second, not a minute.
    """
    require("qdrant_client", "qdrant")
    from qdrant_client import QdrantClient

    # No version check here: it warns from a thread when no server answers; ``connect`` checks it.
    client = QdrantClient(url=url, api_key=api_key, prefer_grpc=prefer_grpc, check_compatibility=False)
    _collection_exists(client, "evidra_pages", url, remote=True)
    client.close()


class QdrantIndex(AddByUpdate):
    """A ``VectorIndex`` stored in a Qdrant collection; see the module docstring."""

    kind: Literal["multi"] = "multi"

    def __init__(
        self,
        client: QdrantClient,
        collection: str,
        dim: int,
        *,
        pool_factor: int = 4,
        candidates: int = 200,
        pooling: Pooling = "mean",
    ) -> None:
        check_pooling(pooling)
        self.client = client
        self.collection = collection
        self.dim = dim
        self.pool_factor = pool_factor
        self.pooling = pooling
        self.candidates = candidates

    @classmethod
    def connect(
        cls,
        dim: int,
        *,
        collection: str = "evidra_pages",
        url: str | None = None,
        location: str | None = None,
        path: str | None = None,
        api_key: str | None = None,
        prefer_grpc: bool = False,
        pool_factor: int = 4,
        candidates: int = 200,
        pooling: Pooling = "mean",
        on_disk: bool = False,
        create: bool = True,
    ) -> QdrantIndex:
        """Open ``collection`` on a server (``url``) or in local mode (``location``/``path``).

        A missing collection is created, or with ``create=False`` reported as a ``CorpusError``;
        an existing one must have been made by this class with the same ``dim``.
        """
        require("qdrant_client", "qdrant")
        from qdrant_client import QdrantClient

        where = url or path or location or "the default local server"
        if url is not None:
            check_server(url, api_key=api_key, prefer_grpc=prefer_grpc)
        client = QdrantClient(url=url, location=location, path=path, api_key=api_key, prefer_grpc=prefer_grpc)
        index = cls(client, collection, dim, pool_factor=pool_factor, candidates=candidates, pooling=pooling)
        if _collection_exists(client, collection, where, remote=url is not None):
            index.check_existing(where)
        elif create:
            index._create(on_disk)
        else:
            client.close()
            raise CorpusError(
                f"Qdrant collection {collection!r} not found at {where}; "
                "build it with `evidra index build --backend qdrant` (or check --collection)"
            )
        return index

    def check_existing(self, where: str, *, close: bool = True) -> None:
        """Refuse a collection not made by evidra or of another width (closing the client first)."""
        vectors = self.client.get_collection(self.collection).config.params.vectors
        multi = vectors.get("multi") if isinstance(vectors, dict) else None
        problem = ""
        if multi is None or not isinstance(vectors, dict) or "pooled" not in vectors:
            problem = "was not made by evidra (no 'multi' and 'pooled' vectors); pick another collection name"
        elif multi.size != self.dim:
            problem = f"holds {multi.size}-d vectors, not {self.dim}-d; it was built with another encoder"
        if problem:
            if close:
                self.client.close()
            raise CorpusError(f"Qdrant collection {self.collection!r} at {where} {problem}")

    def close(self) -> None:
        """Release the client (local mode holds a lock on its directory until then)."""
        self.client.close()

    def __enter__(self) -> QdrantIndex:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _create(self, on_disk: bool) -> None:
        from qdrant_client import models

        maxsim = models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)
        self.client.create_collection(
            self.collection,
            vectors_config={
                "multi": models.VectorParams(
                    size=self.dim,
                    distance=models.Distance.DOT,
                    multivector_config=maxsim,
                    hnsw_config=models.HnswConfigDiff(m=0),
                    on_disk=on_disk,
                    datatype=models.Datatype.FLOAT16,
                ),
                "pooled": models.VectorParams(
                    size=self.dim, distance=models.Distance.DOT, multivector_config=maxsim
                ),
            },
        )
        with warnings.catch_warnings():  # local mode warns that payload indexes are a no-op there
            warnings.simplefilter("ignore", UserWarning)
            self.client.create_payload_index(self.collection, "page_id", models.PayloadSchemaType.KEYWORD)

    # -- writing -------------------------------------------------------------------------------

    def update(
        self,
        page_ids: Sequence[str],
        embeddings: Sequence[Tensor],
        image_paths: Sequence[str] | None = None,
        payloads: Sequence[Mapping[str, object]] | None = None,
    ) -> None:
        from qdrant_client import models

        pages = self._points(page_ids, embeddings, image_paths, payloads)
        points = [
            models.PointStruct(id=pid, vector=dict(vectors), payload=payload)
            for pid, vectors, payload in pages
        ]
        if points:
            self.client.upsert(self.collection, points=points, wait=True)

    def add_batches(self, batches: Iterable[PageBatch], *, replace: bool = False) -> int:
        """Store each batch as it comes: not atomic, unlike the embedded stores. A failed or killed
        call leaves the batches stored before it; adding the same pages again completes it."""
        return self._add_each(batches, replace)

    def delete(self, page_ids: Sequence[str]) -> int:
        from qdrant_client import models

        present = self._present(page_ids)
        if present:
            selector = models.PointIdsList(points=[point_id(p) for p in present])
            self.client.delete(self.collection, points_selector=selector, wait=True)
        return len(present)

    # -- reading -------------------------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def _stored(self, point_ids: list[str]) -> set[str]:
        found = self.client.retrieve(self.collection, ids=point_ids, with_payload=False)
        return {str(point.id) for point in found}

    def _scroll(self, offset: PointOffset) -> tuple[list[str], PointOffset]:
        points, offset = self.client.scroll(
            self.collection, limit=1000, offset=offset, with_payload=["page_id"]
        )
        return [self._page_id(p.payload) for p in points], offset

    def _page_id(self, payload: Mapping[str, object] | None) -> str:
        """A point's ``page_id``, or one line saying the collection holds a point evidra did not write."""
        if payload is None or "page_id" not in payload:
            raise CorpusError(
                f"Qdrant collection {self.collection!r} holds a point with no 'page_id' in its payload; "
                "it was not made by evidra: pick another collection or rebuild it"
            )
        return str(payload["page_id"])

    def search(
        self,
        queries: Sequence[Tensor],
        k: int = 10,
        exclude: Exclude = None,
        where: Mapping[str, object] | None = None,
    ) -> list[list[Hit]]:
        """Top ``k`` per query; ``where`` keeps points whose payload equals every given value."""
        from qdrant_client import models

        requests = []
        for vec, flt in query_filters(_filter, queries, self.dim, k, exclude, where):
            prefetch = (
                models.Prefetch(query=vec, using="pooled", limit=max(self.candidates, k), filter=flt)
                if self.candidates > 0
                else None
            )
            requests.append(
                models.QueryRequest(
                    query=vec, using="multi", prefetch=prefetch, filter=flt, limit=k, with_payload=True
                )
            )
        if not requests:
            return []
        responses = self.client.query_batch_points(self.collection, requests=requests)
        return [[hit_of(p.payload, p.score) for p in r.points] for r in responses]


def _filter(equal: list[tuple[str, Scalar]], skip: list[str]) -> models.Filter:
    """``payload_filter``'s terms as qdrant-client's filter."""
    from qdrant_client import models

    must: list[models.Condition] = [
        models.FieldCondition(key=key, match=models.MatchValue(value=value)) for key, value in equal
    ]
    must_not: list[models.Condition] = (
        [models.FieldCondition(key="page_id", match=models.MatchAny(any=skip))] if skip else []
    )
    return models.Filter(must=must or None, must_not=must_not or None)
