"""A small HTTP search service that batches concurrent requests (stdlib asyncio, no extra deps).

Endpoints (JSON in, JSON out)::

    GET  /health  -> {"status": "ok", "pages": N}
    POST /search  {"queries": ["..."], "k": 5, "exclude": [["page-id", ...]]}
                  -> {"results": [[{"page_id": ..., "score": ..., "image_path": ...}, ...]]}

Requests arriving within ``max_wait_ms`` of each other are gathered, up to ``max_batch`` queries,
into one ``retriever.search`` call (batched MaxSim is 2-6x cheaper per query); searches run one
at a time on a worker thread so the event loop keeps accepting requests. A request holds the
worker for at most ``max_batch`` queries at a time: larger ones are searched in slices, and the
slices of a client that disconnected are dropped, so one large request cannot starve the others.

Hostile clients get a 4xx with a one-line message (see ``evidra.retrieval.http``); an internal
failure answers 500 without its exception text (it goes to the log). With ``api_key`` set,
/search needs ``Authorization: Bearer <key>`` (/health stays open for probes). HTTP/1.1
keep-alive is supported; chunked request bodies are not (clients send Content-Length).

>>> with SearchService(retriever).running() as url:            # doctest: +SKIP
...     SearchClient(url).search(["When was Orion founded?"], k=5)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import hmac
import ipaddress
import logging
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from evidra.errors import InvalidInputError
from evidra.retrieval.base import Hit, Retriever
from evidra.retrieval.http import (
    MAX_BODY,
    MAX_HEADERS,
    HttpError,
    Request,
    SearchLimits,
    parse_search,
    read_request,
    response,
)

__all__ = ["MAX_BODY", "MAX_HEADERS", "HttpError", "SearchService", "ServiceOptions", "hits_from_json"]

logger = logging.getLogger(__name__)

API_KEY_ENV = "EVIDRA_INDEX_API_KEY"  # read by the CLI and the clients, never by SearchService
BATCH_RECORD = 1000  # retriever calls remembered in SearchService.batches


@dataclass(frozen=True)
class ServiceOptions:
    max_batch: int = 32  # queries per retriever call
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_k: int = 100
    idle_timeout_s: float = 30.0  # keep-alive connections idle this long are closed
    max_queries: int = 256  # queries per request (413 above)
    max_query_chars: int = 4096  # characters per query (413 above)
    api_key: str | None = field(default=None, repr=False)  # required as a Bearer token when set

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_ms < 0 or self.max_k < 1:
            raise InvalidInputError("ServiceOptions needs max_batch >= 1, max_wait_ms >= 0, max_k >= 1")
        if self.max_queries < 1 or self.max_query_chars < 1:
            raise InvalidInputError("ServiceOptions needs max_queries >= 1 and max_query_chars >= 1")
        if self.api_key is not None and not self.api_key.strip():
            raise InvalidInputError(f"the API key is empty; set {API_KEY_ENV} to a secret or leave it unset")

    @property
    def limits(self) -> SearchLimits:
        return SearchLimits(self.max_k, self.max_queries, self.max_query_chars)


@dataclass
class _Pending:
    queries: list[str]
    k: int
    exclude: list[list[str]]
    future: asyncio.Future[list[list[Hit]]] = field(repr=False)
    hits: list[list[Hit]] = field(default_factory=list, repr=False)  # slices searched so far
    reader: asyncio.StreamReader | None = field(default=None, repr=False)  # its client's connection

    @property
    def gone(self) -> bool:
        """Its client hung up (checked before each slice is searched, not only every 50 ms)."""
        r = self.reader
        return r is not None and (r.at_eof() or r.exception() is not None)

    @property
    def remaining(self) -> int:
        return len(self.queries) - len(self.hits)


def _shares(pending: Sequence[_Pending], budget: int) -> list[tuple[_Pending, int]]:
    """How many queries of each waiting request go into one batch of ``budget``: the smallest
    requests first, each at most an equal share of what is left, so a one-query request is
    always in the next batch however large the others are (a large request is served
    ``max_batch`` queries at a time, interleaved with everyone else's).

    >>> big, small = _Pending(["q"] * 200, 5, [[]] * 200, None), _Pending(["q"], 5, [[]], None)
    >>> [n for _, n in _shares([big, small], 32)]
    [31, 1]
    """
    order = sorted(range(len(pending)), key=lambda i: pending[i].remaining)
    take = [0] * len(pending)
    for rank, i in enumerate(order):
        share = budget // (len(order) - rank) if budget else 0
        take[i] = min(pending[i].remaining, max(share, 1 if budget else 0))
        budget -= take[i]
    return list(zip(pending, take, strict=True))


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the service on this machine.

    >>> is_loopback("127.0.0.1"), is_loopback("localhost"), is_loopback("0.0.0.0"), is_loopback("::1")
    (True, True, False, True)
    """
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


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
        # queries per retriever call, for stats and tests; the newest BATCH_RECORD only
        self.batches: collections.deque[int] = collections.deque(maxlen=BATCH_RECORD)
        self._connections: set[asyncio.Task[None]] = set()  # open connection handlers

    # -- batching -------------------------------------------------------------------------------

    async def _batcher(self) -> None:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        while True:
            batch = [await self._queue.get()]
            deadline = loop.time() + self.options.max_wait_ms / 1000
            size = batch[0].remaining
            while size < self.options.max_batch:
                try:
                    item = await asyncio.wait_for(self._queue.get(), max(0.0, deadline - loop.time()))
                except TimeoutError:
                    break
                batch.append(item)
                size += item.remaining
            while not self._queue.empty():  # every request waiting now gets a share of this batch
                batch.append(self._queue.get_nowait())
            await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        """Search at most ``max_batch`` queries of ``batch``; unfinished requests queue up again."""
        assert self._queue is not None
        for p in batch:
            if p.gone and not p.future.done():
                p.future.cancel()  # its client left while it waited: no work for nobody
        live = [p for p in batch if not p.future.done()]  # a cancelled one's client is gone
        work = [(p, n) for p, n in _shares(live, self.options.max_batch) if n]
        for k in sorted({p.k for p, _ in work}):  # one call per k: results equal a direct search(k=k)
            await self._search_group([(p, n) for p, n in work if p.k == k], k)
        for p in live:
            if p.future.done():
                continue
            if p.remaining:
                self._queue.put_nowait(p)  # the rest waits behind the requests already queued
            else:
                p.future.set_result(p.hits)

    async def _search_group(self, group: list[tuple[_Pending, int]], k: int) -> None:
        queries = [q for p, n in group for q in p.queries[len(p.hits) : len(p.hits) + n]]
        exclude = [e for p, n in group for e in p.exclude[len(p.hits) : len(p.hits) + n]]
        self.batches.append(len(queries))
        loop = asyncio.get_running_loop()
        try:
            hits = await loop.run_in_executor(self._executor, self._search, queries, k, exclude)
        except Exception as exc:
            for p, _ in group:
                if not p.future.done():
                    p.future.set_exception(exc)
            return
        start = 0
        for p, n in group:
            p.hits.extend(hits[start : start + n])
            start += n

    def _search(self, queries: list[str], k: int, exclude: list[list[str]]) -> list[list[Hit]]:
        return self.retriever.search(queries, k=k, exclude=[set(e) for e in exclude])

    # -- HTTP ------------------------------------------------------------------------------------

    def _check_key(self, req: Request) -> None:
        key = self.options.api_key
        if key is None:
            return
        given = req.headers.get("authorization", "").encode("latin-1")
        if not hmac.compare_digest(given, f"Bearer {key}".encode()):
            raise HttpError(401, f"missing or wrong API key; send Authorization: Bearer ${API_KEY_ENV}")

    async def _route(self, req: Request, reader: asyncio.StreamReader) -> tuple[int, Any]:
        if req.path == "/health":
            if req.method != "GET":
                raise HttpError(405, "use GET /health")
            return 200, {"status": "ok", "pages": self.n_pages}
        if req.path != "/search":
            raise HttpError(404, f"no endpoint {req.path[:80]!r}; use POST /search or GET /health")
        if req.method != "POST":
            raise HttpError(405, "use POST /search with a JSON body")
        self._check_key(req)
        search = parse_search(req.body, self.options.limits)
        assert self._queue is not None
        future: asyncio.Future[list[list[Hit]]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(search.queries, search.k, search.exclude, future, reader=reader))
        try:
            hits = await _unless_gone(future, reader)
        except InvalidInputError as exc:
            raise HttpError(400, str(exc)) from None
        rows = [
            [{"page_id": h.page_id, "score": h.score, "image_path": h.image_path} for h in r] for r in hits
        ]
        return 200, {"results": rows}

    async def _answer(self, req: Request, reader: asyncio.StreamReader) -> tuple[int, Any]:
        try:
            return await self._route(req, reader)
        except HttpError as exc:
            return exc.status, {"error": str(exc)}
        except _ClientGone:
            raise
        except Exception:
            logger.exception("search failed")
            return 500, {"error": "internal error; the service log has the details"}

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:  # tracked, so stopping can end idle keep-alive connections cleanly
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)
        try:
            while True:
                try:
                    req = await asyncio.wait_for(read_request(reader), self.options.idle_timeout_s)
                except HttpError as exc:
                    writer.write(_error(exc.status, str(exc), keep_alive=False))
                    await writer.drain()
                    return
                if req is None:
                    return
                status, payload = await self._answer(req, reader)
                extra = "WWW-Authenticate: Bearer\r\n" if status == 401 else ""
                writer.write(response(status, payload, keep_alive=req.keep_alive, extra=extra))
                await writer.drain()
                if not req.keep_alive:
                    return
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, _ClientGone):
            return
        except asyncio.CancelledError:  # the service is stopping: end quietly (asyncio's stream
            return  # callback would log a cancelled handler task as an error)
        finally:
            writer.close()

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[asyncio.Server, int]:
        """Start listening; returns the server and the bound port (``port=0`` picks a free one)."""
        self._queue = asyncio.Queue()
        self._batcher_task = asyncio.create_task(self._batcher())
        server = await asyncio.start_server(self._handle, host, port)
        bound = int(server.sockets[0].getsockname()[1])
        logger.info("search service on http://%s:%d", host, bound)
        if not is_loopback(host):
            guard = (
                "requests need the API key, which travels unencrypted (put a TLS proxy in front)"
                if self.options.api_key
                else f"anyone who can reach it can search; set {API_KEY_ENV} to require a key"
            )
            logger.warning("search service bound to %s is reachable from other machines: %s", host, guard)
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


async def _unless_gone(future: asyncio.Future[list[list[Hit]]], reader: asyncio.StreamReader) -> Any:
    """``future``'s result; cancelled (and ``_ClientGone`` raised) once the client hangs up."""
    while True:
        done, _ = await asyncio.wait({future}, timeout=0.05)
        if done:
            return future.result()
        if reader.at_eof() or reader.exception() is not None:
            future.cancel()  # the batcher drops its remaining slices
            raise _ClientGone


def _error(status: int, message: str, *, keep_alive: bool) -> bytes:
    return response(status, {"error": message}, keep_alive=keep_alive)


def hits_from_json(rows: Sequence[Sequence[dict[str, Any]]]) -> list[list[Hit]]:
    return [
        [Hit(str(h["page_id"]), float(h["score"]), str(h.get("image_path", ""))) for h in r] for r in rows
    ]
