"""Clients of the search service (``evidra serve-index``), sync and async, with timeouts.

Environments (VRAG-RL's ``<search>`` action) call ``search`` with the pages an episode has already
seen in ``exclude``. ``where`` keeps to the pages whose document metadata it accepts, in the
syntax of ``--where`` (``["file=report.pdf", "year=2024"]``, a mapping, or a ``Where``; see
``evidra.corpus.metadata``): the service filters (it needs its page store's metadata; ``/health``
says ``"where": true``), so a filter costs a few bytes instead of a list of every other page id.
A filter over the service's caps is an ``InvalidInputError`` before anything is sent. Every
failure (timeout, refused connection, 4xx/5xx, a reply that is too large, not JSON or has no
``results``) raises ``SearchServiceError`` with one line naming the URL.

* **Timeout**: ``timeout`` bounds a whole call by the wall clock (connect, send and every read),
  so a server that trickles its answer a byte at a time cannot hold an episode; the blocking
  ``SearchClient`` runs its calls on a private event loop for that.
* **Replies** are read through ``evidra.http.replies``: at most ``max_reply_bytes`` decoded bytes
  (gzip inflated within the cap), strict JSON, the shape checked.
* **Key**: a service started with an API key gets it as ``Authorization: Bearer``: from
  ``api_key``, else from the environment variable ``EVIDRA_INDEX_API_KEY`` (the one
  ``evidra serve-index`` reads) when ``key_policy`` lets it go to the URL: always when the user
  named the URL (the default), and for a URL a recipe named (``KeyPolicy.file("method.index")``)
  only where ``EVIDRA_KEY_HOSTS`` allows (``evidra.safeio.keys``). A secret never sits in a config file
  or a command line, and a server that echoes it sees it replaced by ``***`` in the error.

>>> client = SearchClient("http://127.0.0.1:8765", timeout=10)          # doctest: +SKIP
>>> client.search(["revenue in 2019"], k=3, exclude=[{"a1b2-p0001"}])     # doctest: +SKIP
>>> client.search(["revenue in 2019"], k=3, where=["file=report.pdf"])    # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Collection, Mapping, Sequence
from typing import TypedDict

import httpx

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.corpus.metadata import Where, parse_where
from evidra.http.replies import (
    ERROR_BODY_BYTES,
    MAX_REPLY_BYTES,
    REQUEST_HEADERS,
    LoopThread,
    ReplyError,
    aread_capped,
    loads,
    shown,
)
from evidra.retrieval.interfaces import Exclude, Hit
from evidra.retrieval.service.server import hits_from_json
from evidra.retrieval.service.terms import API_KEY_ENV, MAX_WHERE_CHARS, MAX_WHERE_KEYS, MAX_WHERE_VALUES
from evidra.safeio.keys import KeyPolicy, redact


class SearchServiceError(EvidraError, ConnectionError):
    """The search service could not be reached, rejected the request or sent a bad reply."""


WhereFilter = Where | Sequence[str] | Mapping[str, str | Sequence[str]] | None


def where_json(where: WhereFilter) -> dict[str, list[str]]:
    """``where`` as the service's ``"where"`` object, refused with one line over its caps.

    >>> where_json(["file=a.pdf", "file=b.pdf", "year=2024"])
    {'file': ['a.pdf', 'b.pdf'], 'year': ['2024']}
    """
    chosen = where if isinstance(where, Where) else parse_where(where)
    out = {key: sorted(values) for key, values in chosen.conditions.items()}
    texts = [text for key, values in out.items() for text in (key, *values)]
    if (
        len(out) > MAX_WHERE_KEYS
        or any(len(v) > MAX_WHERE_VALUES for v in out.values())
        or any(len(t) > MAX_WHERE_CHARS for t in texts)
    ):
        raise InvalidInputError(
            f"filter {str(chosen)[:80]!r} is over the search service's caps: at most {MAX_WHERE_KEYS} keys, "
            f"{MAX_WHERE_VALUES} values a key, {MAX_WHERE_CHARS} characters a key or value"
        )
    return out


def _body(queries: Sequence[str], k: int, exclude: Exclude, where: dict[str, list[str]]) -> dict[str, object]:
    body: dict[str, object] = {"queries": list(queries), "k": k}
    if exclude is not None:
        body["exclude"] = [sorted(e) for e in exclude]
    if where:
        body["where"] = where
    return body


def _parse(url: str, status: int, raw: bytes, key: str | None, n_queries: int) -> list[list[Hit]]:
    """The hits of a reply; ``SearchServiceError`` for an error status or a malformed body."""
    if status != 200:
        try:
            data = loads(raw)
        except ReplyError:
            data = None
        message = data.get("error") if isinstance(data, dict) else None
        text = redact(str(message) if message else raw.decode("utf-8", "replace"), (key,))
        raise SearchServiceError(f"{url} answered {status}: {shown(text.encode())}")
    try:
        data = loads(raw)
    except ReplyError as exc:
        raise SearchServiceError(f"{url} answered 200 with {exc}") from None
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, list) or len(results) != n_queries:
        start = shown(redact(raw[:400].decode("utf-8", "replace"), (key,)).encode(), 120)
        raise SearchServiceError(
            f"{url} answered 200 without a 'results' list of {n_queries} hit lists: {start}"
        )
    try:
        return hits_from_json(results)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        reason = shown(str(exc).encode(), 80)
        raise SearchServiceError(
            f"{url} answered 200 with a malformed hit ({type(exc).__name__}: {reason}); "
            "each hit needs a page_id and a numeric score"
        ) from None


class AsyncSearchClient:
    """asyncio client for environments that run many episodes concurrently."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        api_key: str | None = None,
        key_policy: KeyPolicy | None = None,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self.url = base_url.rstrip("/") + "/search"
        self.timeout, self.max_reply_bytes = timeout, max_reply_bytes
        policy = key_policy or KeyPolicy()
        self._key = api_key if api_key is not None else policy.key(API_KEY_ENV, self.url)
        headers = {**REQUEST_HEADERS, **({"Authorization": f"Bearer {self._key}"} if self._key else {})}
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, headers=headers)

    async def _post(self, body: dict[str, object]) -> tuple[int, bytes]:
        async with self._client.stream("POST", self.url, json=body) as response:
            ok = response.status_code == 200
            cap = self.max_reply_bytes if ok else ERROR_BODY_BYTES
            return response.status_code, await aread_capped(response, cap, truncate=not ok)

    async def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        exclude: Sequence[Collection[str]] | None = None,
        where: WhereFilter = None,
    ) -> list[list[Hit]]:
        body = _body(queries, k, exclude, where_json(where))
        try:
            status, raw = await asyncio.wait_for(self._post(body), self.timeout)
        except asyncio.TimeoutError:
            raise SearchServiceError(
                f"search service at {self.url} gave no complete answer within timeout={self.timeout:g} s"
            ) from None
        except httpx.HTTPError as exc:
            raise SearchServiceError(
                redact(f"search service at {self.url} failed: {type(exc).__name__}: {exc}", (self._key,))
            ) from None
        except ReplyError as exc:
            raise SearchServiceError(f"{self.url} answered with {exc}") from None
        return _parse(self.url, status, raw, self._key, len(queries))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncSearchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class _ClientOptions(TypedDict):
    """The keywords ``SearchClient`` hands each ``AsyncSearchClient`` it opens."""

    timeout: float
    api_key: str | None
    key_policy: KeyPolicy | None
    max_reply_bytes: int


class SearchClient:
    """Blocking client, safe to share among threads: calls run on a private event loop (one
    keep-alive pool per instance), each bounded as a whole by ``timeout``."""

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 30.0,
        api_key: str | None = None,
        key_policy: KeyPolicy | None = None,
        max_reply_bytes: int = MAX_REPLY_BYTES,
    ) -> None:
        self._options = _ClientOptions(
            timeout=timeout, api_key=api_key, key_policy=key_policy, max_reply_bytes=max_reply_bytes
        )
        self._base_url = base_url
        self.url = base_url.rstrip("/") + "/search"
        self._lock = threading.Lock()
        self._runner: tuple[LoopThread, AsyncSearchClient] | None = None

    def _open(self) -> tuple[LoopThread, AsyncSearchClient]:
        with self._lock:
            if self._runner is None or not self._runner[0].alive:  # none yet, or a forked child
                loop = LoopThread("evidra-search-client")
                client = AsyncSearchClient(self._base_url, **self._options)
                self._runner = (loop, client)
                weakref.finalize(self, _close, loop, client)
            return self._runner

    def search(
        self,
        queries: Sequence[str],
        k: int = 10,
        exclude: Sequence[Collection[str]] | None = None,
        where: WhereFilter = None,
    ) -> list[list[Hit]]:
        where_json(where)  # a bad filter fails here, on the caller's thread
        loop, client = self._open()
        return loop.run(client.search(queries, k, exclude, where))

    def close(self) -> None:
        with self._lock:
            runner, self._runner = self._runner, None
        if runner is not None:
            _close(*runner)

    def __enter__(self) -> SearchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _close(loop: LoopThread, client: AsyncSearchClient) -> None:
    loop.close(client.aclose())
