"""The search service's ASGI app (starlette): routes, refusals, the API key and the access log.

``build_app(service)`` gives the app that ``SearchService`` hands to uvicorn. Every refusal is
JSON ``{"error": "..."}`` with a one-line message: 404 and 405 name the endpoints; a body over
``max_body`` (declared, or counted while a chunked body streams in) is 413; more than
``MAX_HEADERS`` headers 431; a body that takes longer than ``idle_timeout_s`` to arrive 408; a
missing or wrong key 401; a malformed /search body 400 or 413 (``evidra.retrieval.service.terms``). An
unexpected failure answers 500 "internal error; ..." and its traceback goes to the log
(uvicorn's ``uvicorn.error`` logger), never to the client.

The access log is one line per request on the ``evidra.retrieval.access`` logger (INFO): method,
path, status, queries, milliseconds. A request whose client left before its answer was ready
is logged with status 499 and answered with nothing.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from http import HTTPStatus
from typing import Protocol

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from evidra.core.errors import InvalidInputError
from evidra.corpus.metadata import PageMeta
from evidra.http.server_limits import HttpError, error_response, read_body
from evidra.retrieval.interfaces import Hit
from evidra.retrieval.service.terms import (
    API_KEY_ENV,
    MAX_HEADERS,
    ClientGone,
    SearchRequest,
    ServiceOptions,
    filtered,
    parse_search,
)

access_logger = logging.getLogger("evidra.retrieval.access")

USAGE = {"/search": "use POST /search with a JSON body", "/health": "use GET /health"}
CLIENT_GONE = 499  # logged (never sent) for a request whose client hung up first, as nginx does


class Service(Protocol):
    """What the app serves (``evidra.retrieval.service.server.SearchService``): a batching search over one
    index, its page count and page store, and the lifespan that runs the batcher."""

    options: ServiceOptions
    n_pages: int
    pages: Mapping[str, PageMeta] | None

    async def search(self, request: SearchRequest, receive: Receive) -> list[list[Hit]]:
        """The request's hits; raises ``ClientGone`` once ``receive`` says its client left."""
        ...

    def lifespan(self, app: object) -> AbstractAsyncContextManager[None]: ...


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return error_response(exc.status, str(exc), close=exc.close)


async def _starlette_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no such route, a wrong method) as one-line JSON."""
    assert isinstance(exc, HTTPException)
    path = request.url.path
    if exc.status_code == 404:
        return error_response(404, f"no endpoint {path[:80]!r}; use POST /search or GET /health")
    if exc.status_code == 405:
        return error_response(405, USAGE.get(path, HTTPStatus(405).phrase))
    return error_response(exc.status_code, HTTPStatus(exc.status_code).phrase)


async def _internal_error(request: Request, exc: Exception) -> Response:
    # starlette re-raises the exception after this answer, so uvicorn logs its traceback
    return error_response(500, "internal error; the service log has the details")


class AccessLog:
    """Logs one line per request, ends a request whose client left, and caps the header count."""

    def __init__(self, app: ASGIApp, *, enabled: bool) -> None:
        self.app = app
        self.enabled = enabled

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), 500

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if len(scope["headers"]) > MAX_HEADERS:
                await error_response(431, f"more than {MAX_HEADERS} headers", close=True)(
                    scope, receive, send
                )
                status = 431
            else:
                await self.app(scope, receive, send_noting_status)
        except (ClientGone, ClientDisconnect):
            status = CLIENT_GONE  # nothing to answer: uvicorn drops a response to a closed connection
        finally:
            if self.enabled:
                queries = scope.get("state", {}).get("queries", 0)
                ms = (time.perf_counter() - start) * 1e3
                path = scope["path"][:200]
                access_logger.info("%s %s %d queries=%d %.1f ms", scope["method"], path, status, queries, ms)


def _check_key(request: Request, key: str | None) -> None:
    if key is None:
        return
    given = request.headers.get("authorization", "").encode("latin-1")
    if not hmac.compare_digest(given, f"Bearer {key}".encode()):
        raise HttpError(401, f"missing or wrong API key; send Authorization: Bearer ${API_KEY_ENV}")


def build_app(service: Service) -> Starlette:
    """The ASGI app of ``service``: GET /health and POST /search (see the module docstring)."""
    options = service.options

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "pages": service.n_pages, "where": service.pages is not None})

    async def search(request: Request) -> Response:
        _check_key(request, options.api_key)
        body = await read_body(request, options.max_body, options.idle_timeout_s)
        parsed = filtered(parse_search(body, options.limits), service.pages)
        request.state.queries = len(parsed.queries)
        try:
            hits = await service.search(parsed, request.receive)
        except InvalidInputError as exc:
            raise HttpError(400, str(exc)) from None
        known = service.pages or {}
        rows = [
            [
                {
                    "page_id": h.page_id,
                    "score": h.score,
                    "image_path": h.image_path,
                    **(known[h.page_id].record() if h.page_id in known else {}),
                }
                for h in r
            ]
            for r in hits
        ]
        return JSONResponse({"results": rows})

    return Starlette(
        routes=[Route("/health", health, methods=["GET"]), Route("/search", search, methods=["POST"])],
        middleware=[Middleware(AccessLog, enabled=options.access_log)],
        exception_handlers={
            HttpError: _http_error,
            HTTPException: _starlette_error,
            Exception: _internal_error,
        },
        lifespan=service.lifespan,
    )
