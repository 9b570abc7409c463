"""How uvicorn runs the search service: its h11 parser with a capped head and a head deadline.

uvicorn times a connection out only while it is idle *after* a response, and resets that timer
on every byte received, so a client that connects and sends nothing, or trickles a request head
a byte at a time, would hold its connection forever (uvicorn issue #157 asks for the missing
"request start" timeout). ``HeadDeadlineProtocol`` adds it: each request head must be complete
within ``timeout_keep_alive`` seconds of the connection opening or of the previous response,
else the connection is closed. The body has its own deadline in the app (408).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from evidra.retrieval.http import MAX_HEAD

GRACEFUL_S = 5  # on stop, requests still in flight get this long before they are cancelled


class HeadDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol, plus a deadline for every request head (see the module docstring)."""

    _head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in: the app now owns the deadline
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._arm()  # the next request on this keep-alive connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_timer = self.loop.call_later(self.timeout_keep_alive, self._expire)

    def _disarm(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _expire(self) -> None:
        self._head_timer = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def make_server(app: Any, *, idle_timeout_s: float) -> uvicorn.Server:
    """A uvicorn server for ``app`` that configures no logging (the CLI does that)."""
    config = uvicorn.Config(
        app,
        http=HeadDeadlineProtocol,  # h11 caps the head at MAX_HEAD; httptools would not
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
