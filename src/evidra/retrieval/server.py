"""A small HTTP search service that batches concurrent requests (stdlib asyncio, no extra deps).

Endpoints (JSON in, JSON out)::

    GET  /health  -> {"status": "ok", "pages": N}
    POST /search  {"queries": ["..."], "k": 5, "exclude": [["page-id", ...]]}
                  -> {"results": [[{"page_id": ..., "score": ..., "image_path": ...}, ...]]}

Requests arriving within ``max_wait_ms`` of each other are gathered, up to ``max_batch`` queries,
into one ``retriever.search`` call (batched MaxSim is 2-6x cheaper per query);
searches run one at a time on a worker thread so the event loop keeps accepting requests.
Malformed requests get a 4xx with a message. HTTP/1.1 keep-alive is supported; chunked request
bodies are not (clients send Content-Length).

>>> with SearchService(retriever).running() as url:            # doctest: +SKIP
...     SearchClient(url).search(["When was Orion founded?"], k=5)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from evidra.errors import InvalidInputError
from evidra.retrieval.base import Hit, Retriever

logger = logging.getLogger(__name__)

MAX_BODY = 1 << 20
MAX_HEADERS = 64


class HttpError(Exception):
    """An error answered with ``status`` and a JSON ``{"error": message}`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class ServiceOptions:
    max_batch: int = 32  # queries per retriever call
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_k: int = 100
    idle_timeout_s: float = 30.0  # keep-alive connections idle this long are closed

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_ms < 0 or self.max_k < 1:
            raise InvalidInputError("ServiceOptions needs max_batch >= 1, max_wait_ms >= 0, max_k >= 1")


@dataclass
class _Pending:
    queries: list[str]
    k: int
    exclude: list[list[str]]
    future: asyncio.Future[list[list[Hit]]] = field(repr=False)


@dataclass(frozen=True)
class _Request:
    method: str
    path: str
    body: bytes
    keep_alive: bool


def parse_search(body: bytes, max_k: int) -> tuple[list[str], int, list[list[str]]]:
    """Validate a /search body; raises ``HttpError(400)`` naming the bad field."""
    try:
        data = json.loads(body or b"null")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise HttpError(400, f"body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HttpError(400, 'body must be a JSON object like {"queries": ["..."], "k": 5}')
    queries = data.get("queries", [data["query"]] if "query" in data else None)
    if (
        not isinstance(queries, list)
        or not queries
        or not all(isinstance(q, str) and q.strip() for q in queries)
    ):
        raise HttpError(400, '"queries" must be a non-empty list of non-empty strings')
    k = data.get("k", 10)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= max_k:
        raise HttpError(400, f'"k" must be an integer in 1..{max_k}, got {k!r}')
    exclude = data.get("exclude") or [[] for _ in queries]
    if (
        not isinstance(exclude, list)
        or len(exclude) != len(queries)
        or not all(isinstance(e, list) and all(isinstance(p, str) for p in e) for e in exclude)
    ):
        raise HttpError(400, '"exclude" must be a list with one list of page ids per query')
    return queries, k, exclude


class SearchService:
    """Serves one retriever over HTTP; see the module docstring."""

    def __init__(
        self, retriever: Retriever, options: ServiceOptions | None = None, *, n_pages: int = -1
    ) -> None:
        self.retriever = retriever
        self.options = options or ServiceOptions()
        self.n_pages = n_pages
        self._queue: asyncio.Queue[_Pending] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evidra-search")
        self.batches: list[int] = []  # queries per retriever call, for stats and tests
        self._connections: set[asyncio.Task[None]] = set()  # open connection handlers

    # -- batching -------------------------------------------------------------------------------

    async def _batcher(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.options.max_wait_ms / 1000
            size = len(batch[0].queries)
            while size < self.options.max_batch:
                try:
                    item = await asyncio.wait_for(self._queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                batch.append(item)
                size += len(item.queries)
            await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        loop = asyncio.get_running_loop()
        for k in sorted({p.k for p in batch}):  # one call per k: results equal a direct search(k=k)
            group = [p for p in batch if p.k == k]
            queries = [q for p in group for q in p.queries]
            exclude = [e for p in group for e in p.exclude]
            self.batches.append(len(queries))
            try:
                hits = await loop.run_in_executor(self._executor, self._search, queries, k, exclude)
            except Exception as exc:
                for p in group:
                    if not p.future.done():
                        p.future.set_exception(exc)
                continue
            start = 0
            for p in group:
                if not p.future.done():
                    p.future.set_result(hits[start : start + len(p.queries)])
                start += len(p.queries)

    def _search(self, queries: list[str], k: int, exclude: list[list[str]]) -> list[list[Hit]]:
        return self.retriever.search(queries, k=k, exclude=[set(e) for e in exclude])

    # -- HTTP ------------------------------------------------------------------------------------

    async def _route(self, req: _Request) -> tuple[int, Any]:
        if req.path == "/health":
            if req.method != "GET":
                raise HttpError(405, "use GET /health")
            return 200, {"status": "ok", "pages": self.n_pages}
        if req.path != "/search":
            raise HttpError(404, f"no endpoint {req.path!r}; use POST /search or GET /health")
        if req.method != "POST":
            raise HttpError(405, "use POST /search with a JSON body")
        queries, k, exclude = parse_search(req.body, self.options.max_k)
        assert self._queue is not None
        future: asyncio.Future[list[list[Hit]]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(queries, k, exclude, future))
        try:
            hits = await future
        except InvalidInputError as exc:
            raise HttpError(400, str(exc)) from None
        rows = [
            [{"page_id": h.page_id, "score": h.score, "image_path": h.image_path} for h in r] for r in hits
        ]
        return 200, {"results": rows}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # tracked, so stopping can end idle keep-alive connections cleanly
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        try:
            while True:
                try:
                    req = await asyncio.wait_for(_read_request(reader), self.options.idle_timeout_s)
                except HttpError as exc:
                    writer.write(_response(exc.status, {"error": str(exc)}, keep_alive=False))
                    await writer.drain()
                    return
                if req is None:
                    return
                try:
                    status, payload = await self._route(req)
                except HttpError as exc:
                    status, payload = exc.status, {"error": str(exc)}
                except Exception as exc:
                    logger.exception("search failed")
                    status, payload = 500, {"error": f"internal error: {type(exc).__name__}: {exc}"}
                writer.write(_response(status, payload, keep_alive=req.keep_alive))
                await writer.drain()
                if not req.keep_alive:
                    return
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[asyncio.Server, int]:
        """Start listening; returns the server and the bound port (``port=0`` picks a free one)."""
        self._queue = asyncio.Queue()
        self._batcher_task = asyncio.create_task(self._batcher())
        server = await asyncio.start_server(self._handle, host, port)
        bound = int(server.sockets[0].getsockname()[1])
        logger.info("search service on http://%s:%d", host, bound)
        return server, bound

    async def serve_forever(self, host: str = "127.0.0.1", port: int = 8765) -> None:
        server, _ = await self.start(host, port)
        async with server:
            await server.serve_forever()

    @contextlib.contextmanager
    def running(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Run the service on a background thread; yields its base URL, stops on exit."""
        loop = asyncio.new_event_loop()
        started = asyncio.run_coroutine_threadsafe(self.start(host, port), loop)
        thread = threading.Thread(target=loop.run_forever, name="evidra-search-loop", daemon=True)
        thread.start()
        server, bound = started.result(timeout=30)
        try:
            yield f"http://{host}:{bound}"
        finally:
            asyncio.run_coroutine_threadsafe(self._stop(server), loop).result(timeout=30)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
            loop.close()
            self._executor.shutdown(wait=True)

    async def _stop(self, server: asyncio.Server) -> None:
        server.close()
        for task in list(self._connections):  # clients may still hold keep-alive connections
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        await server.wait_closed()
        self._batcher_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._batcher_task


async def _read_request(reader: asyncio.StreamReader) -> _Request | None:
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {line[:80]!r}")
    method, path, version = parts
    headers: dict[str, str] = {}
    while True:
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        if len(headers) >= MAX_HEADERS:
            raise HttpError(431, f"more than {MAX_HEADERS} headers")
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(411, "chunked bodies are not supported; send Content-Length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise HttpError(400, "Content-Length is not an integer") from None
    if length < 0 or length > MAX_BODY:
        raise HttpError(413, f"body of {length} bytes exceeds the limit of {MAX_BODY}")
    body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return _Request(method, path.split("?", 1)[0], body, keep)


def _response(status: int, payload: Any, *, keep_alive: bool) -> bytes:
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n"
    )
    return head.encode() + body


def hits_from_json(rows: Sequence[Sequence[dict[str, Any]]]) -> list[list[Hit]]:
    return [
        [Hit(str(h["page_id"]), float(h["score"]), str(h.get("image_path", ""))) for h in r] for r in rows
    ]
