"""The retriever that serves one page store: index directories or ``serve-index`` URLs, checked.

``evidra ask`` and ``evidra.RAG`` retrieve page ids and then read the pages from a store, so an
index must have been built over that store's pages. ``attach`` opens each location, checks it
against the store before any answer is attempted, and fuses several (e.g. a ColQwen2 index and
a BM25 index: hybrid retrieval) by ``hybrid.Fusion``: z-scores over each index's top 100 hits by
default. Every failure names the location
and the fix: a directory that is missing or holds no index, an index built over another store,
a URL with no service behind it.

>>> hits = attach(["idx/"], store).search("When was Orion founded?", k=3)   # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.retrieval.interfaces import Hit, Retriever

if TYPE_CHECKING:
    from evidra.corpus.metadata import Where
    from evidra.corpus.store import PageStore
    from evidra.retrieval.hybrid import Fusion

logger = logging.getLogger(__name__)

HEALTH_TIMEOUT_S = 5.0
PROBE_QUERY = "the page"  # any text: its top hit only has to exist in the store


def is_url(where: str) -> bool:
    return where.startswith(("http://", "https://"))


def registered_index(store: PageStore) -> str | None:
    """The newest index registered over ``store`` (by ``evidra index build --store``) that still exists."""
    for path in store.indexes():
        if Path(path).is_dir():
            return path
        logger.warning("store %s names index %s, which no longer exists; skipping it", store.root, path)
    return None


def _build_hint(store: PageStore, out: str) -> str:
    return f"`evidra index build --store {store.root} --out {out} --encoder bm25` (or colqwen2 --model CKPT)"


@dataclass(frozen=True, eq=False)
class StoreRetriever:
    """Text-to-pages search whose hits are all pages of ``store``."""

    store: PageStore
    where: tuple[str, ...]  # the index directories / URLs, as given
    retriever: Retriever
    closers: tuple[Callable[[], None], ...] = ()
    filters: bool = False  # one serve-index URL whose service filters by metadata ("where")

    def search(
        self, question: str, k: int, exclude: Collection[str] = (), where: Where | None = None
    ) -> list[Hit]:
        """The top ``k`` pages for ``question``, none of them in ``exclude``; ``where`` only when
        ``filters`` (the service keeps to the pages it accepts)."""
        from evidra.retrieval.service.client import SearchClient, SearchServiceError

        remote = self.retriever if self.filters and isinstance(self.retriever, SearchClient) else None
        if where and remote is None:
            raise InvalidInputError(
                f"index {', '.join(self.where)} cannot filter by metadata; exclude the pages it rules out"
            )
        try:
            if remote is not None and where:
                (hits,) = remote.search([question], k=k, exclude=[exclude], where=where)
            else:
                (hits,) = self.retriever.search([question], k=k, exclude=[exclude])
        except SearchServiceError as exc:
            raise InvalidInputError(
                f"index {', '.join(self.where)} failed to answer ({exc}); check that `evidra serve-index` "
                "still runs there, or pass the index directory instead"
            ) from exc
        for hit in hits:
            if hit.page_id not in self.store:
                raise InvalidInputError(
                    f"index {', '.join(self.where)} returned page {hit.page_id!r}, which store "
                    f"{self.store.root} does not hold: it serves an index built over another store; "
                    f"serve or pass one built with {_build_hint(self.store, 'DIR')}"
                )
        return hits

    def retrieve(self, question: str, k: int, where: Where | Sequence[str] | None = None) -> list[Hit]:
        """The top ``k`` pages for ``question`` among those ``where`` accepts (``["file=a.pdf"]``;
        ``evidra.corpus.metadata``): a filtering service keeps to them itself, any other index
        searches with the rest excluded. ``RAG``, ``evidra ask`` and ``evidra serve`` retrieve here."""
        from evidra.corpus.metadata import Where, parse_where

        chosen = where if isinstance(where, Where) else parse_where(where)
        allowed = allowed_pages(self.store, chosen)
        if allowed is not None and self.filters:
            return self.search(question, k, where=chosen)
        exclude = () if allowed is None else set(self.store.page_ids()) - allowed
        return self.search(question, k, exclude=exclude)

    def close(self) -> None:
        for close in self.closers:
            close()


def allowed_pages(store: PageStore, where: Where) -> set[str] | None:
    """The page ids of ``store`` that ``where`` accepts (None: no filter); none at all is an error
    naming the filter and the keys it may use."""
    if not where:
        return None
    allowed = set(store.page_ids_where(where))
    if not allowed:
        raise InvalidInputError(
            f"no page of store {store.root} matches {where}; filter on file=NAME, doc=ID, "
            "page=N, title=TEXT or a --meta key given at ingest (see `evidra pages`)"
        )
    return allowed


def attach(
    where: Sequence[str], store: PageStore, encoder: str = "", fusion: Fusion | None = None
) -> StoreRetriever:
    """Open every location in ``where`` for ``store``; two or more are fused by ``fusion`` (None:
    ``hybrid.DEFAULT_FUSION``), whose weights, if given, follow the order of ``where``. ``encoder``
    replaces the checkpoint recorded by a visual index directory (the same weights, moved)."""
    from evidra.retrieval.hybrid import DEFAULT_FUSION, HybridRetriever

    if not where:
        raise InvalidInputError("attach needs at least one index directory or serve-index URL")
    fusion = fusion or DEFAULT_FUSION
    if fusion.weights is not None and len(fusion.weights) != len(where):
        raise InvalidInputError(
            f"got {len(fusion.weights)} fusion weights for {len(where)} indexes; give one per index, in order"
        )
    retrievers: list[Retriever] = []
    closers: list[Callable[[], None]] = []
    filters = False
    try:
        for location in where:
            if is_url(location):
                retriever, close, filters = _open_url(location)
                closers.append(close)
                _probe(retriever, location, store)
            else:
                retriever, close = _open_dir(location, store, encoder)
                closers.append(close)
            retrievers.append(retriever)
    except BaseException:
        for close in closers:
            close()
        raise
    joined = retrievers[0] if len(retrievers) == 1 else HybridRetriever(tuple(retrievers), fusion)
    return StoreRetriever(store, tuple(where), joined, tuple(closers), filters and len(retrievers) == 1)


def _open_url(url: str) -> tuple[Retriever, Callable[[], None], bool]:
    """A ``serve-index`` client, after its ``/health`` answered (so a wrong URL fails here), and
    whether the service filters by metadata. The URL is the user's (``--index``, ``attach``'s
    argument): the service's key may go there."""
    import httpx

    from evidra.http.replies import ERROR_BODY_BYTES, REQUEST_HEADERS, ReplyError, loads, read_capped
    from evidra.retrieval.service.client import SearchClient

    try:
        with httpx.stream(
            "GET",
            url.rstrip("/") + "/health",
            timeout=HEALTH_TIMEOUT_S,
            trust_env=False,
            headers=REQUEST_HEADERS,
        ) as response:
            status = response.status_code
            health = loads(read_capped(response, ERROR_BODY_BYTES)) if status == 200 else None
        healthy = isinstance(health, dict) and health.get("status") == "ok"
    except ReplyError as exc:
        raise InvalidInputError(
            f"index URL {url} answered /health with {exc}, not an `evidra serve-index` service; pass the URL "
            "that `evidra serve-index` prints"
        ) from None
    except httpx.HTTPError as exc:
        raise InvalidInputError(
            f"index URL {url} is unreachable ({type(exc).__name__}); start the service with "
            "`evidra serve-index --index DIR --port PORT`, or pass the index directory instead"
        ) from None
    if not healthy:
        raise InvalidInputError(
            f"index URL {url} answered /health with {status}, not an `evidra serve-index` "
            "service; pass the URL that `evidra serve-index` prints"
        )
    client = SearchClient(url)
    return client, client.close, isinstance(health, dict) and health.get("where") is True


def _probe(retriever: Retriever, where: str, store: PageStore) -> None:
    """One search before anything heavy loads: a service over another store fails here."""
    (hits,) = retriever.search([PROBE_QUERY], k=1)
    if hits and hits[0].page_id not in store:
        raise InvalidInputError(
            f"index {where} serves page {hits[0].page_id!r}, which store {store.root} does not hold: "
            f"it serves an index built over another store; serve one built with {_build_hint(store, 'DIR')}"
        )


def _open_dir(path: str, store: PageStore, encoder: str = "") -> tuple[Retriever, Callable[[], None]]:
    """An index directory whose pages are all in ``store`` (a store page it lacks is only a warning)."""
    import torch

    from evidra.retrieval.interfaces import EncoderOptions
    from evidra.retrieval.lifecycle.index_folder import MANIFEST, open_index

    if not Path(path).is_dir():
        state = "is a file, not an index folder" if Path(path).exists() else "does not exist"
        raise InvalidInputError(f"index directory {path!r} {state}; build it with {_build_hint(store, path)}")
    if not (Path(path) / MANIFEST).is_file():
        raise InvalidInputError(
            f"{path!r} holds no index (no {MANIFEST}); pass the --out folder of `evidra index build`, "
            f"or build one with {_build_hint(store, 'DIR')}"
        )
    gpu = torch.cuda.is_available()  # as serve-index does: bfloat16 on a GPU, float32 on a CPU
    options = EncoderOptions(device="cuda" if gpu else "cpu", dtype="bfloat16" if gpu else "float32")
    engine = open_index(path, options=options, encoder_path=encoder or None)
    indexed = set(engine.index.page_ids())
    foreign = sorted(pid for pid in indexed if pid not in store)
    if foreign:
        engine.close()
        share = (
            f"none of its {len(indexed)} pages is"
            if len(foreign) == len(indexed)
            else f"{len(foreign)} of its {len(indexed)} pages (e.g. {foreign[0]}) are not"
        )
        raise InvalidInputError(
            f"index {path!r} was built over another store: {share} in store {store.root}; "
            f"build one over this store with {_build_hint(store, 'DIR')}"
        )
    unindexed = len(store) - len(indexed)
    if unindexed:
        logger.warning(
            "index %s lacks %d pages of store %s; add them with `evidra index add --index %s --store %s`",
            path,
            unindexed,
            store.root,
            path,
            store.root,
        )
    return engine.retriever, engine.close
