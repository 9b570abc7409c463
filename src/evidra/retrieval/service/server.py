"""A small HTTP search service that batches concurrent requests (starlette app, uvicorn server).

Endpoints (JSON in, JSON out)::

    GET  /health  -> {"status": "ok", "pages": N, "where": true}   (where: it can filter by metadata)
    POST /search  {"queries": ["..."], "k": 5, "exclude": [["page-id", ...]], "where": {"file": "a.pdf"}}
                  -> {"results": [[{"page_id": ..., "score": ..., "image_path": ...}, ...]]}

A service that knows the page store of its index (``pages``) adds each hit's document id, file,
page number, title and metadata (``PageMeta.record``) and accepts ``where`` filters on them.

Requests arriving within ``max_wait_ms`` of each other are gathered, up to ``max_batch`` queries,
into one ``retriever.search`` call (batched MaxSim is 2-6x cheaper per query); searches run one
at a time on a worker thread so the event loop keeps accepting requests. A request holds the
worker for at most ``max_batch`` queries at a time: larger ones are searched in slices, every
waiting request gets a share of each batch (smallest first), and the slices of a client that
disconnected are dropped, so one large request cannot starve the others.

The HTTP side is a starlette app (``evidra.retrieval.service.app``) served by uvicorn with its h11
parser (``evidra.retrieval.service.uvicorn_limits``): HTTP/1.1 keep-alive, chunked request bodies, a request
head capped at ``MAX_HEAD`` bytes and due within ``idle_timeout_s`` of the connection or of the
previous response, and at most ``max_connections`` open connections. Hostile clients get a 4xx
with a one-line message; an internal failure answers 500 without its exception text (it goes
to the log). With ``api_key`` set, /search needs ``Authorization: Bearer <key>`` (/health stays
open for probes). starlette and uvicorn are imported only when a service starts, so the
clients, which import this module, stay light.

>>> with SearchService(retriever).running() as url:            # doctest: +SKIP
...     SearchClient(url).search(["When was Orion founded?"], k=5)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evidra.core.errors import EvidraError
from evidra.core.jsonvalue import JSON, json_kind
from evidra.retrieval.interfaces import Hit, Retriever
from evidra.retrieval.service.terms import (
    API_KEY_ENV,
    MAX_BODY,
    MAX_HEAD,
    MAX_HEADERS,
    ClientGone,
    HttpError,
    SearchRequest,
    ServiceOptions,
)

if TYPE_CHECKING:
    import uvicorn

    from evidra.corpus.metadata import PageMeta

__all__ = [
    "API_KEY_ENV",
    "MAX_BODY",
    "MAX_HEAD",
    "MAX_HEADERS",
    "HttpError",
    "SearchService",
    "ServiceError",
    "ServiceOptions",
    "hits_from_json",
]

logger = logging.getLogger(__name__)

BATCH_RECORD = 1000  # retriever calls remembered in SearchService.batches
STOP_S = 60  # how long stopping may take (uvicorn cancels requests still in flight after 5 s)

Receive = Callable[[], Awaitable[Mapping[str, object]]]  # an ASGI receive channel


class ServiceError(EvidraError):
    """The search service could not start (the port is taken, the address is not this machine's)."""


@dataclass
class _Pending:
    queries: list[str]
    k: int
    exclude: list[list[str]]
    future: asyncio.Future[list[list[Hit]]] = field(repr=False)  # cancelled when its client leaves
    hits: list[list[Hit]] = field(default_factory=list, repr=False)  # slices searched so far

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


async def _disconnected(receive: Receive) -> None:
    """Returns once the ASGI channel says the client is gone (its request body is already read)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class SearchService:
    """Serves one retriever over HTTP; see the module docstring."""

    def __init__(
        self,
        retriever: Retriever,
        options: ServiceOptions | None = None,
        *,
        n_pages: int = -1,
        pages: Mapping[str, PageMeta] | None = None,
    ) -> None:
        self.retriever = retriever
        self.options = options or ServiceOptions()
        self.n_pages = n_pages
        self.pages = pages  # document metadata by page id: hits carry it, and "where" filters on it
        # queries per retriever call, for stats and tests; the newest BATCH_RECORD only
        self.batches: collections.deque[int] = collections.deque(maxlen=BATCH_RECORD)
        self._queue: asyncio.Queue[_Pending] | None = None  # these two live while the app runs
        self._executor: ThreadPoolExecutor | None = None

    # -- batching -------------------------------------------------------------------------------

    async def search(self, request: SearchRequest, receive: Receive) -> list[list[Hit]]:
        """``request``'s hits, searched in batches with everyone else's; raises ``ClientGone``
        (and its unsearched slices are dropped) once ``receive`` says its client left."""
        assert self._queue is not None, "the service is not running"
        future: asyncio.Future[list[list[Hit]]] = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(_Pending(request.queries, request.k, request.exclude, future))
        left = asyncio.ensure_future(_disconnected(receive))
        either: list[asyncio.Future[list[list[Hit]]] | asyncio.Future[None]] = [future, left]
        try:
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not future.done():
                raise ClientGone
            return future.result()
        finally:
            left.cancel()
            future.cancel()  # a no-op once it has its result; else the batcher skips it

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
                except asyncio.TimeoutError:
                    break
                batch.append(item)
                size += item.remaining
            while not self._queue.empty():  # every request waiting now gets a share of this batch
                batch.append(self._queue.get_nowait())
            await self._run(batch)

    async def _run(self, batch: list[_Pending]) -> None:
        """Search at most ``max_batch`` queries of ``batch``; unfinished requests queue up again."""
        assert self._queue is not None
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
        group = [(p, n) for p, n in group if not p.future.done()]  # left during an earlier k's call
        if not group:
            return
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

    @contextlib.asynccontextmanager
    async def lifespan(self, app: object) -> AsyncIterator[None]:
        """The app's lifespan: the queue, the search thread and the batcher live while it runs."""
        self._queue = asyncio.Queue()
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evidra-search")
        batcher = asyncio.create_task(self._batcher())
        try:
            yield
        finally:
            batcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await batcher
            await asyncio.to_thread(self._executor.shutdown)  # a slice being searched finishes
            self._queue = self._executor = None

    # -- serving ---------------------------------------------------------------------------------

    def _server(self) -> uvicorn.Server:
        from evidra.retrieval.service.app import build_app
        from evidra.retrieval.service.uvicorn_limits import make_server

        options = self.options
        return make_server(
            build_app(self), idle_timeout_s=options.idle_timeout_s, max_connections=options.max_connections
        )

    def _listen(self, host: str, port: int) -> tuple[socket.socket, str]:
        """A socket bound to ``host:port`` (``port=0`` picks a free one) and its base URL."""
        sock, url = listen(host, port, "search service", self.options.api_key, "search")
        logger.info("search service on %s", url)
        return sock, url

    def serve_forever(
        self, host: str = "127.0.0.1", port: int = 8765, *, ready: Callable[[str], None] | None = None
    ) -> None:
        """Serve on this thread until SIGINT or SIGTERM (uvicorn's handlers stop it gracefully);
        ``ready`` gets the base URL once the socket is bound."""
        sock, url = self._listen(host, port)
        with sock:
            if ready is not None:
                ready(url)
            self._server().run(sockets=[sock])

    @contextlib.contextmanager
    def running(self, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
        """Run the service on a background thread; yields its base URL, stops on exit."""
        sock, url = self._listen(host, port)
        with on_a_thread(self._server(), sock, url, "the search service"):
            yield url


@contextlib.contextmanager
def on_a_thread(server: uvicorn.Server, sock: socket.socket, url: str, what: str) -> Iterator[None]:
    """Run a uvicorn ``server`` on ``sock`` in a background thread until the block ends; ``what``
    names it in the error when it does not start within 30 s."""
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="evidra-server")
    thread.daemon = True
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if not thread.is_alive() or time.monotonic() > deadline:
                raise ServiceError(f"{what} on {url} did not start; its log says why")
            time.sleep(0.005)
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=STOP_S)
        sock.close()


def listen(
    host: str, port: int, what: str, api_key: str | None, open_to: str, key_env: str = API_KEY_ENV
) -> tuple[socket.socket, str]:
    """A socket bound to ``host:port`` (``port=0`` picks a free one) and its base URL; a host
    other machines can reach gets one warning naming ``what`` and what anyone could then do
    (``open_to``: "search", "read and add documents") unless ``api_key`` guards it (``key_env``:
    the variable that sets it)."""
    try:
        sock = bind_tcp(host, port)
    except OSError as exc:
        raise ServiceError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --host or --port"
        ) from None
    bound = int(sock.getsockname()[1])
    url = f"http://[{host}]:{bound}" if ":" in host else f"http://{host}:{bound}"
    if not is_loopback(host):
        guard = (
            "requests need the API key, which travels unencrypted (put a TLS proxy in front)"
            if api_key
            else f"anyone who can reach it can {open_to}; set {key_env} to require a key"
        )
        logger.warning("%s bound to %s is reachable from other machines: %s", what, host, guard)
    return sock, url


def bind_tcp(host: str, port: int) -> socket.socket:
    """A listening TCP socket, made as asyncio makes its own: with ``IPPROTO_TCP`` as its protocol,
    which asyncio checks before it turns Nagle's algorithm off on accepted connections (a socket
    made with protocol 0 keeps it on, and uvicorn's two writes per response then wait ~40 ms for
    the client's delayed ACK)."""
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    return sock


def hits_from_json(rows: Sequence[JSON]) -> list[list[Hit]]:
    """Hits of a service's reply. Their image paths are dropped: a path the server names is a file
    of the server's machine, and opening it here would let a hostile server choose which local file
    an episode shows; the caller opens pages from its own page store by id. A row or hit of
    another shape is a ``TypeError``, a missing field a ``KeyError``, saying which."""
    out = []
    for row in rows:
        if not isinstance(row, list):
            raise TypeError(f"a hit list is {json_kind(row)}")
        out.append([_hit(h) for h in row])
    return out


def _hit(h: JSON) -> Hit:
    if not isinstance(h, dict):
        raise TypeError(f"a hit is {json_kind(h)}, not an object")
    page_id, score = h["page_id"], h["score"]  # a missing one is a KeyError naming it
    if not isinstance(score, (int, float, str)):
        raise TypeError(f"the score of hit {str(page_id)[:40]!r} is {json_kind(score)}")
    return Hit(str(page_id), float(score), "")
