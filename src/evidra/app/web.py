"""The starlette app of ``evidra serve``: HTML pages, the JSON API and the OpenAI-compatible API.

Pages (Jinja2 templates under ``evidra/templates/app``, one stylesheet and one script, no build
step): ``/`` (documents, upload, search, ask), ``/documents/<source>?page=N`` (page through a
document), ``/login`` (when a key is set). JSON: ``GET /api/documents``, ``GET /api/search?q=&k=``,
``POST /api/upload?name=<file>`` (the file as the body, written to disk as it arrives; answered
202 with the upload job, which ingests and indexes it: ``evidra.app.uploads``), ``GET
/api/uploads`` and ``GET /api/uploads/<id>`` (the jobs and how far each is), ``DELETE
/api/uploads/<id>`` (cancels one), ``POST /api/index`` (adds pages the index lacks; NDJSON
progress lines), ``POST /api/ask`` (``{"question", "k", "history", "conversation"}``, the
history being the earlier turns as chat messages; NDJSON events: ``pages``, ``token``...,
``answer`` or ``error``; the answer is kept in the named conversation, else a new one, and its
event carries both ids: ``evidra.app.conversation_routes`` lists, reopens, deletes and exports
them), ``GET /pages/<id>/image`` (PNG, JPEG or WebP, told by the file's first bytes),
``GET /health``. ``/v1/models`` and ``/v1/chat/completions`` are ``evidra.app.openai_api``.
Refusals are one-line JSON errors, as ``serve-index`` answers them; every response carries the
headers of ``evidra.app.headers`` (``nosniff``, a content security policy).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Route
from starlette.types import ASGIApp

from evidra.app.auth import COOKIE, Guard, session_token
from evidra.app.citations import answer_json, citation_label, matched_words, page_json
from evidra.app.conversation_routes import check_conversation, conversation_routes, keep
from evidra.app.errors import RETRY_AFTER_S, Busy, NotFound, Unsupported
from evidra.app.headers import SecurityHeaders
from evidra.app.http import HeldStream, ServeOptions, k_of, question_of, read_json
from evidra.app.messages import history_of
from evidra.app.openai_api import chat_routes
from evidra.app.streams import Done, Failed, Found, Piece, Report, answer_events, progress_events
from evidra.app.workspace import ingestible_name
from evidra.core.errors import EvidraError, InvalidInputError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.templating import render
from evidra.http.server_limits import HttpError, error_response, read_body, stream_body
from evidra.retrieval.service.app import AccessLog

if TYPE_CHECKING:
    from evidra.app.workspace import AskTicket, Workspace

NDJSON = "application/x-ndjson"
STATIC = {"app.css": "text/css", "app.js": "text/javascript"}
Handler = Callable[[Request], Awaitable[Response]]


def _html(template: str, status: int = 200, **context: object) -> HTMLResponse:
    return HTMLResponse(render(f"app/{template}", **context), status_code=status)


def _ndjson(events: AsyncIterator[JSONObject], ticket: AskTicket | None = None) -> StreamingResponse:
    async def lines() -> AsyncIterator[bytes]:
        async for event in events:
            yield (json.dumps(event, ensure_ascii=False) + "\n").encode()

    headers = {"Cache-Control": "no-store"}
    if ticket is not None:
        return HeldStream(ticket, lines(), media_type=NDJSON, headers=headers)
    return StreamingResponse(lines(), media_type=NDJSON, headers=headers)


def event_json(event: Found | Piece | Done | Failed) -> JSONObject:
    """One NDJSON line of ``/api/ask``."""
    if isinstance(event, Found):
        pages: list[JSON] = [page_json(page, hit.score) for hit, page in event.pages]
        return {"type": "pages", "pages": pages, "ms": event.ms}
    if isinstance(event, Piece):
        return {"type": "token", "text": event.text, "ms": event.ms}
    if isinstance(event, Done):
        return {"type": "answer", **answer_json(event.answer), "ms": event.ms}
    return {"type": "error", "error": event.message}


class Pages:
    """The handlers of ``build_app``, one method per route, over one workspace and its options."""

    def __init__(self, workspace: Workspace, options: ServeOptions) -> None:
        self.workspace, self.options = workspace, options

    async def home(self, request: Request) -> Response:
        from evidra.corpus.ingest import SUPPORTED_SUFFIXES

        docs = await self.workspace.documents()
        accept = ",".join(sorted(SUPPORTED_SUFFIXES))
        return _html(
            "home.html.j2", docs=docs, can_answer=self.workspace.can_answer, k=self.options.k, accept=accept
        )

    async def document(self, request: Request) -> Response:
        source = request.path_params["source"]
        pages = await self.workspace.pages_of(source)
        number = k_of(request.query_params.get("page"), 1, ServeOptions(max_k=len(pages), k=1))
        page = pages[number - 1]
        return _html("document.html.j2", source=source, pages=pages, page=page, label=citation_label(page))

    async def image(self, request: Request) -> Response:
        image = await self.workspace.image_file(request.path_params["page_id"])
        return FileResponse(
            image.path, media_type=image.media_type, headers={"Cache-Control": "private, max-age=3600"}
        )

    async def documents(self, request: Request) -> Response:
        docs = await self.workspace.documents()
        return JSONResponse(
            {"documents": [{"source": d.source, "pages": d.pages, "first_page": d.first_page} for d in docs]}
        )

    async def search(self, request: Request) -> Response:
        query = question_of(request.query_params.get("q"), self.options)
        k = k_of(request.query_params.get("k"), 10, self.options)
        start = time.perf_counter()
        found = await self.workspace.search(query, k)
        ms = round((time.perf_counter() - start) * 1e3, 1)
        hits = [page_json(p, h.score, matched_words(p, query)) for h, p in found]
        return JSONResponse({"query": query, "hits": hits, "ms": ms})

    async def upload(self, request: Request) -> Response:
        """Refused before the body is read (then the connection closes) for a name ingest does not
        read or a server with ``max_uploads`` in flight; else the body goes to disk and the
        upload becomes a job (202)."""
        try:
            name = ingestible_name(request.query_params.get("name", ""))
            incoming = self.workspace.uploads.receive(name, self.options.max_uploads)
        except Unsupported as exc:
            raise HttpError(415, str(exc), close=True) from None
        except InvalidInputError as exc:
            raise HttpError(400, str(exc), close=True) from None
        except Busy as exc:
            raise HttpError(503, str(exc), close=True, retry_after=RETRY_AFTER_S) from None
        try:
            size = await stream_body(
                request, incoming.write, self.options.max_upload, self.options.idle_timeout_s
            )
        except BaseException:
            incoming.discard()
            raise
        job = self.workspace.uploads.submit(incoming, size)
        return JSONResponse(job.as_json(), status_code=202, headers={"Location": f"/api/uploads/{job.id}"})

    async def uploads(self, request: Request) -> Response:
        return JSONResponse({"uploads": [job.as_json() for job in self.workspace.uploads.all()]})

    async def upload_job(self, request: Request) -> Response:
        return JSONResponse(self.workspace.uploads.get(request.path_params["job_id"]).as_json())

    async def cancel_upload(self, request: Request) -> Response:
        return JSONResponse(self.workspace.uploads.cancel(request.path_params["job_id"]).as_json())

    async def index(self, request: Request) -> Response:
        async def work(report: Report) -> JSONObject:
            added = await self.workspace.index_new(lambda done, total: report(_progress(done, total)))
            return {"type": "done", "added": added}

        return _ndjson(progress_events(work))

    async def ask(self, request: Request) -> Response:
        body = await read_json(request, self.options)
        question = question_of(body.get("question"), self.options)
        history = history_of(body.get("history"), self.options)
        k = k_of(body.get("k"), self.options.k, self.options)
        if not self.workspace.can_answer:
            raise HttpError(
                409, "this server has no model; start it with --model or --endpoint to ask questions"
            )
        kept = await check_conversation(self.workspace, body.get("conversation"))
        ticket = self.workspace.admit()  # Busy (503) here, before the stream starts

        async def events() -> AsyncIterator[JSONObject]:
            async for event in answer_events(self.workspace, question, k, history, ticket):
                if isinstance(event, Done):
                    yield {**event_json(event), **await self._keep(kept, event)}
                else:
                    yield event_json(event)

        return _ndjson(events(), ticket)

    async def _keep(self, conversation: str | None, done: Done) -> JSONObject:
        """The answer kept in its conversation: the ids to reopen it by, or why it was not kept."""
        try:
            cid, turn = await keep(self.workspace, conversation, done.answer)
        except EvidraError as exc:
            return {"not_kept": str(exc).splitlines()[0][:300]}
        return {"conversation": cid, "turn": turn}

    async def health(self, request: Request) -> Response:
        docs = await self.workspace.documents()
        return JSONResponse({"status": "ok", "documents": len(docs), "model": self.workspace.can_answer})

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name not in STATIC:
            raise HttpError(404, f"no static file {name[:40]!r}")
        text = resources.files("evidra").joinpath("templates", "app", name).read_text(encoding="utf-8")
        return Response(text, media_type=STATIC[name], headers={"Cache-Control": "no-cache"})

    async def login_page(self, request: Request) -> Response:
        return _html("login.html.j2", failed=False)

    async def login(self, request: Request) -> Response:
        body = await read_body(request, 4096, self.options.idle_timeout_s)
        given = parse_qs(body.decode("utf-8", "replace")).get("key", [""])[0]
        if self.options.api_key is None or not _same(given, self.options.api_key):
            return _html("login.html.j2", status=401, failed=True)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, session_token(self.options.api_key), httponly=True, samesite="strict")
        return response

    def routes(self) -> list[Route]:
        return [
            Route("/", self.home, methods=["GET"]),
            Route("/documents/{source:path}", self.document, methods=["GET"]),
            Route("/pages/{page_id}/image", self.image, methods=["GET"]),
            Route("/api/documents", self.documents, methods=["GET"]),
            Route("/api/search", self.search, methods=["GET"]),
            Route("/api/upload", self.upload, methods=["POST"]),
            Route("/api/uploads", self.uploads, methods=["GET"]),
            Route("/api/uploads/{job_id}", self.upload_job, methods=["GET"]),
            Route("/api/uploads/{job_id}", self.cancel_upload, methods=["DELETE"]),
            Route("/api/index", self.index, methods=["POST"]),
            Route("/api/ask", self.ask, methods=["POST"]),
            Route("/health", self.health, methods=["GET"]),
            Route("/static/{name}", self.static, methods=["GET"]),
            Route("/login", self.login_page, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
        ]


def build_app(workspace: Workspace, options: ServeOptions, *, loopback_only: bool = True) -> ASGIApp:
    """The ASGI app over ``workspace`` (see the module docstring); the security headers wrap it
    whole, so even a server error's 500 carries them."""
    app = Starlette(
        routes=[
            *Pages(workspace, options).routes(),
            *chat_routes(workspace, options),
            *conversation_routes(workspace),
        ],
        middleware=[
            Middleware(AccessLog, enabled=options.access_log),
            Middleware(Guard, key=options.api_key, loopback_only=loopback_only),
        ],
        exception_handlers={
            HttpError: _http_error,
            EvidraError: _evidra_error,
            HTTPException: _starlette_error,
        },
    )
    return SecurityHeaders(app)


def _progress(done: int, total: int) -> JSONObject:
    return {"type": "progress", "done": done, "total": total}


def _same(given: str, key: str) -> bool:
    import hmac

    return hmac.compare_digest(given.encode(), key.encode())


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HttpError)
    return error_response(exc.status, str(exc), close=exc.close, retry_after=exc.retry_after)


async def _evidra_error(request: Request, exc: Exception) -> Response:
    message = str(exc).splitlines()[0][:500]
    if isinstance(exc, Busy):
        return error_response(503, message, retry_after=RETRY_AFTER_S)
    status = 404 if isinstance(exc, NotFound) else 415 if isinstance(exc, Unsupported) else 400
    return error_response(status, message)


async def _starlette_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    if exc.status_code == 404:
        return error_response(404, f"no page {request.url.path[:80]!r}; start at /")
    return error_response(exc.status_code, HTTPStatus(exc.status_code).phrase)
