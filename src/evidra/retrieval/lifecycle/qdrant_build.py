"""Where a Qdrant-backed index keeps its vectors, and how a build on a server stages its collection.

``QdrantSpec.url`` names a server or cluster (backend ``qdrant``, qdrant-client); without it,
``QdrantSpec.path`` names the folder, inside the index folder, of a Qdrant Edge shard (backend
``qdrant-edge``), which is staged with the rest of the index folder and needs nothing below.

A build on a server never writes into the collection it is asked for. It fills a new collection
``{name}-{8 hex digits}`` and, once every page is in, points the alias ``name`` at it in one
request (Qdrant switches aliases atomically). The index manifest records ``name``, so searches,
``index add`` and ``index delete`` reach the collection through the alias. So a failed or killed
build never leaves points under ``name``: a failed one drops its collection; a killed one leaves
a note (``STAGING_NOTE``) in its staging folder naming the collection, and the next build at the
same path drops it.

``name`` may be missing, an alias of an empty evidra collection (re-pointed), or an empty evidra
collection (dropped, then made the alias); one that holds pages is refused before any work.
Two builds into the same ``name`` at once are not supported: the later switch wins.
"""

from __future__ import annotations

import json
import logging
import secrets
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import InvalidInputError
from evidra.core.jsonfields import get_bool, get_int, get_str
from evidra.core.jsonvalue import JSON, need_object
from evidra.safeio.jsonfiles import read_capped_text
from evidra.safeio.keys import KeyPolicy

if TYPE_CHECKING:
    from qdrant_client import QdrantClient
    from qdrant_client.http.models import AliasOperations

    from evidra.retrieval.index.qdrant import QdrantIndex

logger = logging.getLogger(__name__)

STAGING_NOTE = "qdrant-staging.json"  # in a build's staging folder: the collection it fills
Pooling = Literal["mean", "clustered"]


def _pooling(value: str) -> Pooling:
    if value == "mean":
        return "mean"
    if value == "clustered":
        return "clustered"
    raise ValueError(f"pooling {value!r}: use 'mean' or 'clustered'")


@dataclass(frozen=True)
class QdrantSpec:
    """Where a Qdrant-backed index keeps its vectors, and how it searches them."""

    url: str = ""  # server or cluster, e.g. http://localhost:6333; empty: a Qdrant Edge shard at ``path``
    path: str = ""  # the Qdrant Edge shard: a folder name inside the index folder (e.g. "qdrant")
    collection: str = "evidra_pages"  # server: a build makes it an alias of the collection it filled
    candidates: int = 200  # pooled prefetch size; 0 scores the full multi-vectors exhaustively
    pool_factor: int = 4
    pooling: Pooling = "mean"  # prefetch vectors: consecutive runs | k-means
    prefer_grpc: bool = False
    # True only when the user named ``url`` on the command line; never read from or written to a
    # file, so a manifest or staging note cannot send $QDRANT_API_KEY to a server it names
    key_from_user: bool = field(default=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        if bool(self.url) == bool(self.path):
            raise InvalidInputError(
                "a Qdrant index needs exactly one of url (a server) or path (its Qdrant Edge shard folder)"
            )
        if self.candidates < 0 or self.pool_factor < 1:
            raise InvalidInputError("Qdrant candidates must be >= 0 and pool_factor >= 1")

    @property
    def where(self) -> str:
        return self.url or self.path

    @property
    def backend(self) -> str:
        """The ``stores.INDEXES`` entry that keeps the vectors: a server, or the embedded engine."""
        return "qdrant" if self.url else "qdrant-edge"

    def _api_key(self) -> str | None:
        """``$QDRANT_API_KEY`` where it may go (``evidra.safeio.keys``): to a URL the user named, or to one
        a file names only where ``EVIDRA_KEY_HOSTS`` allows it."""
        if not self.url:
            return None
        policy = KeyPolicy() if self.key_from_user else KeyPolicy.file("the index's retriever.json")
        return policy.key("QDRANT_API_KEY", self.url)

    def record(self) -> dict[str, object]:
        """The spec as written to a file (without ``key_from_user``)."""
        out = asdict(self)
        out.pop("key_from_user")
        return out

    @classmethod
    def from_record(cls, raw: JSON) -> QdrantSpec:
        """The spec a file holds (a ``TypeError`` or ``ValueError`` for a key or value it cannot
        hold); whatever it says, its URL counts as named by the file."""
        row = need_object(raw, "the Qdrant spec")
        unknown = sorted(set(row) - {f.name for f in fields(cls)})
        if unknown:
            raise TypeError(f"the Qdrant spec has unknown keys {unknown[:5]}")
        return cls(
            url=get_str(row, "url", cls.url),
            path=get_str(row, "path", cls.path),
            collection=get_str(row, "collection", cls.collection),
            candidates=get_int(row, "candidates", cls.candidates),
            pool_factor=get_int(row, "pool_factor", cls.pool_factor),
            pooling=_pooling(get_str(row, "pooling", cls.pooling)),
            prefer_grpc=get_bool(row, "prefer_grpc", cls.prefer_grpc),
        )

    def check_server(self) -> None:
        """Fail fast when ``url`` names a server that does not answer (Qdrant Edge: nothing to do)."""
        if self.url:
            from evidra.retrieval.index.qdrant import check_server

            check_server(self.url, api_key=self._api_key(), prefer_grpc=self.prefer_grpc)

    def connect(self, dim: int, *, create: bool) -> QdrantIndex:
        """The collection on the server at ``url``."""
        from evidra.retrieval.index.qdrant import QdrantIndex

        return QdrantIndex.connect(
            dim,
            collection=self.collection,
            url=self.url,
            api_key=self._api_key(),
            prefer_grpc=self.prefer_grpc,
            pool_factor=self.pool_factor,
            pooling=self.pooling,
            candidates=self.candidates,
            create=create,
        )


def stage_collection(target: QdrantSpec, folder: Path) -> QdrantSpec:
    """``target`` with a new collection name to build into, recorded in ``folder`` first."""
    staged = replace(target, collection=f"{target.collection}-{secrets.token_hex(4)}")
    (folder / STAGING_NOTE).write_text(json.dumps(staged.record()))
    return staged


def check_target(index: QdrantIndex, name: str, where: str) -> None:
    """Refuse ``name`` (on ``index``'s connection) if it holds pages or was not made by evidra."""
    from evidra.retrieval.index.qdrant import QdrantIndex

    if not index.client.collection_exists(name):
        return
    target = QdrantIndex(index.client, name, index.dim)
    target.check_existing(where, close=False)
    held = len(target)
    if held:
        raise InvalidInputError(
            f"Qdrant collection {name!r} at {where} already holds {held} pages; pass another "
            "--collection, or add to it through the index directory that built it"
        )


def publish_alias(index: QdrantIndex, name: str, where: str) -> None:
    """Point alias ``name`` at ``index``'s (filled) collection, in one request where ``name`` is
    an alias already; an empty collection called ``name`` is dropped first."""
    from qdrant_client import models

    check_target(index, name, where)  # it may have been filled since the build began
    client = index.client
    ops: list[AliasOperations] = []
    if name in {a.alias_name for a in client.get_aliases().aliases}:
        ops.append(models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=name)))
    elif client.collection_exists(name):
        client.delete_collection(name)
    alias = models.CreateAlias(collection_name=index.collection, alias_name=name)
    ops.append(models.CreateAliasOperation(create_alias=alias))
    client.update_collection_aliases(change_aliases_operations=ops)


def drop_collection(client: QdrantClient, name: str) -> None:
    """Drop collection ``name`` and every alias pointing at it."""
    from qdrant_client import models

    aliases = client.get_collection_aliases(name).aliases
    if aliases:
        ops = [
            models.DeleteAliasOperation(delete_alias=models.DeleteAlias(alias_name=a.alias_name))
            for a in aliases
        ]
        client.update_collection_aliases(change_aliases_operations=ops)
    client.delete_collection(name)


def drop_noted(folder: Path) -> None:
    """Drop the collection a build staged in ``folder`` noted, if any (its leftover, once killed).

    Only a server's collection is dropped (a note naming anything else is not this code's, and is
    left alone); a server that does not answer is logged, naming the collection to drop by hand.
    """
    note = folder / STAGING_NOTE
    if not note.is_file():
        return
    try:
        spec = QdrantSpec.from_record(json.loads(read_capped_text(note, "Qdrant staging note")))
    except (ValueError, TypeError) as exc:
        logger.warning("cannot read %s (%s); its Qdrant collection, if any, is left", note, exc)
        return
    if not spec.url:
        return
    from qdrant_client import QdrantClient

    try:
        client = QdrantClient(url=spec.url, api_key=spec._api_key(), prefer_grpc=spec.prefer_grpc)
        try:
            if client.collection_exists(spec.collection):
                drop_collection(client, spec.collection)
                logger.info(
                    "dropped Qdrant collection %s at %s, left by an interrupted build",
                    spec.collection,
                    spec.where,
                )
        finally:
            client.close()
    except Exception as exc:  # a server that is down or refuses: the build goes on
        logger.warning(
            "could not drop Qdrant collection %r at %s, left by an interrupted build (%s); drop it by hand",
            spec.collection,
            spec.where,
            exc,
        )
