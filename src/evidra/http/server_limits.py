"""What evidra's HTTP servers (``serve-index`` and ``evidra serve``) share: refusals and bodies.

* ``HttpError``: a refusal with a status and a one-line message, answered as JSON
  ``{"error": message}`` by ``error_response``; ``close`` ends the connection after it (the rest
  of the request was left unread), ``retry_after`` (seconds) is sent as ``Retry-After`` (a 503
  of a server that is busy for now). A 401 carries ``WWW-Authenticate: Bearer``.
* ``read_body`` and ``stream_body``: a request body refused with 413 once its ``Content-Length``
  or the bytes that have arrived pass the cap (starlette's own ``max_body_size`` would answer a
  declared oversize in plain text, not as a one-line JSON error), and with 408 when it takes
  longer than its deadline to arrive (a client that trickles a body cannot hold a worker).
  ``read_body`` returns the bytes; ``stream_body`` hands them on in pieces (an upload written to
  disk as it arrives, never held whole in memory).

starlette is imported only where a response is built, so a client that imports a server's
request checks (``evidra.retrieval.service.terms``) stays light.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse

PIECE = 1 << 20  # bytes ``stream_body`` gathers before it hands them on


class HttpError(Exception):
    """An error answered with ``status`` and a JSON ``{"error": message}`` body; ``close`` ends the
    connection after it (the rest of the request was left unread); ``retry_after`` seconds, when
    given, go out as ``Retry-After``."""

    def __init__(
        self, status: int, message: str, *, close: bool = False, retry_after: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.close = close
        self.retry_after = retry_after


def error_response(
    status: int, message: str, *, close: bool = False, retry_after: int | None = None
) -> JSONResponse:
    """``{"error": message}`` with ``status`` (and ``Connection: close`` when ``close``,
    ``Retry-After`` when ``retry_after`` is given)."""
    from starlette.responses import JSONResponse

    headers = {"Connection": "close"} if close else {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def stream_body(
    request: Request, write: Callable[[bytes], Awaitable[None]], limit: int, deadline_s: float
) -> int:
    """Hand the body to ``write`` in pieces of up to about ``PIECE`` bytes; returns its size.
    Refused with 413 once declared or grown over ``limit`` bytes, 408 when it has not all
    arrived within ``deadline_s`` seconds (what was written by then stays the caller's to drop)."""
    declared = request.headers.get("content-length", "")  # h11 has checked it is a plain integer
    if declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"a body of {declared[:20]} bytes exceeds the limit of {limit}", close=True)

    async def pump() -> int:
        size, piece = 0, bytearray()
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise HttpError(413, f"the body exceeds the limit of {limit} bytes", close=True)
            piece += chunk
            if len(piece) >= PIECE:
                await write(bytes(piece))
                piece.clear()
        if piece:
            await write(bytes(piece))
        return size

    try:
        return await asyncio.wait_for(pump(), deadline_s)
    except asyncio.TimeoutError:
        raise HttpError(408, f"the body did not arrive within {deadline_s:g} s", close=True) from None


async def read_body(request: Request, limit: int, deadline_s: float) -> bytes:
    """The body, refused with 413 once declared or grown over ``limit`` bytes, 408 when it has not
    all arrived within ``deadline_s`` seconds."""
    body = bytearray()

    async def keep(piece: bytes) -> None:
        body.extend(piece)

    await stream_body(request, keep, limit, deadline_s)
    return bytes(body)
