"""Clients of the search service (``evidra serve-index``), sync and async, with timeouts.

Environments (VRAG-RL's ``<search>`` action) call ``search`` with the pages an episode has already
seen in ``exclude``. Every failure (timeout, refused connection, 4xx/5xx) raises
``SearchServiceError`` with the server's message. A service started with an API key gets it as
``Authorization: Bearer``: from ``api_key``, else from the environment variable
``EVIDRA_INDEX_API_KEY`` (the one ``evidra serve-index`` reads), so a secret never sits in a
config file or a command line.

>>> client = SearchClient("http://127.0.0.1:8765", timeout=10)          # doctest: +SKIP
>>> client.search(["revenue in 2019"], k=3, exclude=[{"a1b2-p0001"}])     # doctest: +SKIP
"""

from __future__ import annotations

import os
from collections.abc import Collection, Sequence
from typing import Any

import httpx

from evidra.errors import EvidraError
from evidra.retrieval.base import Exclude, Hit
from evidra.retrieval.server import API_KEY_ENV, hits_from_json


class SearchServiceError(EvidraError, ConnectionError):
    """The search service could not be reached or rejected the request."""


def _body(queries: Sequence[str], k: int, exclude: Exclude) -> dict[str, Any]:
    body: dict[str, Any] = {"queries": list(queries), "k": k}
    if exclude is not None:
        body["exclude"] = [sorted(e) for e in exclude]
    return body


def _headers(api_key: str | None) -> dict[str, str]:
    key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


def _parse(url: str, response: httpx.Response) -> list[list[Hit]]:
    try:
        data = response.json()
    except ValueError:
        raise SearchServiceError(f"{url} answered {response.status_code} with a non-JSON body") from None
    if response.status_code != 200:
        raise SearchServiceError(f"{url} answered {response.status_code}: {data.get('error', data)}")
    return hits_from_json(data["results"])


class SearchClient:
    """Blocking client; one keep-alive connection pool per instance."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/search"
        self._client = httpx.Client(timeout=timeout, trust_env=False, headers=_headers(api_key))

    def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]:
        try:
            response = self._client.post(self.url, json=_body(queries, k, exclude))
        except httpx.HTTPError as exc:
            raise SearchServiceError(
                f"search service at {self.url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return _parse(self.url, response)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> SearchClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncSearchClient:
    """asyncio client for environments that run many episodes concurrently."""

    def __init__(self, base_url: str, *, timeout: float = 30.0, api_key: str | None = None) -> None:
        self.url = base_url.rstrip("/") + "/search"
        self._client = httpx.AsyncClient(timeout=timeout, trust_env=False, headers=_headers(api_key))

    async def search(
        self, queries: Sequence[str], k: int = 10, exclude: Sequence[Collection[str]] | None = None
    ) -> list[list[Hit]]:
        try:
            response = await self._client.post(self.url, json=_body(queries, k, exclude))
        except httpx.HTTPError as exc:
            raise SearchServiceError(
                f"search service at {self.url} failed: {type(exc).__name__}: {exc}"
            ) from exc
        return _parse(self.url, response)

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> AsyncSearchClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
