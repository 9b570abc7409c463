"""How uvicorn runs evidra's HTTP services: its h11 parser with a capped head, a head deadline
that is re-armed after every response, and a cap on open connections.

uvicorn times a connection out only while it is idle *after* a response, and cancels that timer
on every byte received, so a client that connects and sends nothing, trickles a request head a
byte at a time, or sends one more byte of a body the app never read (after a 401, a 404, or a
/health with a body) would hold its connection forever (uvicorn issue #157 asks for the missing
"request start" timeout). ``GuardedProtocol`` adds the deadline: from the connection opening
and from every response on, the next request head must be complete within
``timeout_keep_alive`` seconds, whatever bytes arrive meanwhile, else the connection is closed.
While a request is being answered the app owns the time (the body's own deadline answers 408).

Open connections are capped at ``max_connections`` (and at half the process's file-descriptor
limit): at the cap, a new connection closes the one idle the longest (no request in flight);
when every connection is busy, the newcomer is answered 503 and closed. So connections held
by clients that send nothing cannot exhaust file descriptors or lock out a probe of /health.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import time
from collections.abc import Awaitable, Callable
from typing import ClassVar

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from evidra.retrieval.service.terms import MAX_HEAD

logger = logging.getLogger(__name__)

GRACEFUL_S = 5  # on stop, requests still in flight get this long before they are cancelled
MAX_CONNECTIONS = 512  # open connections per server (further capped by the descriptor limit)
MIN_CONNECTIONS = 8
REFUSED_LINGER_S = 1.0  # a refused connection is read and dropped this long before it is closed
BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\ncontent-length: 62\r\n"
    b'connection: close\r\n\r\n{"error": "too many open connections; try again in a moment"}\n'
)


def connection_cap(wanted: int) -> int:
    """``wanted``, lowered to half of this process's soft file-descriptor limit (the rest is left
    for the index, the page store and the model's files).

    >>> connection_cap(10) <= 10
    True
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return max(wanted, MIN_CONNECTIONS)
    return max(MIN_CONNECTIONS, min(wanted, soft // 2))


class GuardedProtocol(H11Protocol):
    """uvicorn's h11 protocol with a re-armed head deadline and a connection cap (see the module
    docstring). ``make_server`` subclasses it with the server's own cap."""

    max_connections: ClassVar[int] = MAX_CONNECTIONS
    _head_timer: asyncio.TimerHandle | None = None
    _idle_since: float = 0.0
    _refused: bool = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._idle_since = time.monotonic()
        self._arm()
        if len(self.connections) > self.max_connections and not self._evict_one():
            logger.warning("refused a connection: %d open, all busy", len(self.connections) - 1)
            self._refuse()

    def _refuse(self) -> None:
        """Answer 503 and close; the request is read and dropped meanwhile, since closing a socket
        with unread bytes resets it and the client would see a reset instead of the 503."""
        self._refused = True
        self._disarm()
        self.transport.write(BUSY)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(REFUSED_LINGER_S, self.transport.close)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self._busy():  # a new request's head is in: the app now owns the deadline
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._busy():
            self._idle_since = time.monotonic()
            self._arm()  # the next request head (or the end of a body left unread) is due

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _busy(self) -> bool:
        """Whether a request is being answered on this connection."""
        return self.cycle is not None and not self.cycle.response_complete

    def _evict_one(self) -> bool:
        """Close the connection idle the longest; False when every other one is busy."""
        idle = [
            c
            for c in self.connections
            if c is not self
            and isinstance(c, GuardedProtocol)
            and not c._busy()
            and not c._refused
            and not c.transport.is_closing()
        ]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c._idle_since)
        oldest.transport.close()
        return True

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.timeout_keep_alive, self._expire)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if not self._busy() and not self.transport.is_closing():
            self.transport.close()  # a head, or the rest of a body left unread, overstayed the deadline


def make_server(
    app: Callable[..., Awaitable[None]], *, idle_timeout_s: float, max_connections: int = MAX_CONNECTIONS
) -> uvicorn.Server:
    """A uvicorn server for ``app`` that configures no logging (the CLI does that)."""
    protocol = type(
        "GuardedProtocol", (GuardedProtocol,), {"max_connections": connection_cap(max_connections)}
    )
    config = uvicorn.Config(
        app,
        http=protocol,  # h11 caps the head at MAX_HEAD; httptools would not
        h11_max_incomplete_event_size=MAX_HEAD,
        loop="asyncio",
        lifespan="on",
        ws="none",
        log_config=None,
        access_log=False,  # evidra's own access log has the query count and the time
        proxy_headers=False,  # the client address is the socket's, not an X-Forwarded-For claim
        server_header=False,
        timeout_keep_alive=math.ceil(idle_timeout_s),
        timeout_graceful_shutdown=GRACEFUL_S,
    )
    return uvicorn.Server(config)
