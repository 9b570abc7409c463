"""What evidra's HTTP servers (``serve-index`` and ``evidra serve``) share: refusals and bodies.

* ``HttpError``: a refusal with a status and a one-line message, answered as JSON
  ``{"error": message}`` by ``error_response``; ``close`` ends the connection after it (the rest
  of the request was left unread). A 401 carries ``WWW-Authenticate: Bearer``.
* ``read_body``: a request body refused with 413 once its ``Content-Length`` or the bytes that
  have arrived pass the cap (starlette's own ``max_body_size`` would answer a declared oversize
  in plain text, not as a one-line JSON error), and with 408 when it takes longer than its
  deadline to arrive (a client that trickles a body cannot hold a worker).

starlette is imported only where a response is built, so a client that imports a server's
request checks (``evidra.retrieval.http``) stays light.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import JSONResponse


class HttpError(Exception):
    """An error answered with ``status`` and a JSON ``{"error": message}`` body; ``close`` ends the
    connection after it (the rest of the request was left unread)."""

    def __init__(self, status: int, message: str, *, close: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.close = close


def error_response(status: int, message: str, *, close: bool = False) -> JSONResponse:
    """``{"error": message}`` with ``status`` (and ``Connection: close`` when ``close``)."""
    from starlette.responses import JSONResponse

    headers = {"Connection": "close"} if close else {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    return JSONResponse({"error": message}, status_code=status, headers=headers)


async def read_body(request: Request, limit: int, deadline_s: float) -> bytes:
    """The body, refused with 413 once declared or grown over ``limit`` bytes, 408 when it has not
    all arrived within ``deadline_s`` seconds."""
    declared = request.headers.get("content-length", "")  # h11 has checked it is a plain integer
    if declared.isdigit() and int(declared) > limit:
        raise HttpError(413, f"a body of {declared[:20]} bytes exceeds the limit of {limit}", close=True)

    async def collect() -> bytes:
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise HttpError(413, f"the body exceeds the limit of {limit} bytes", close=True)
        return bytes(body)

    try:
        return await asyncio.wait_for(collect(), deadline_s)
    except asyncio.TimeoutError:
        raise HttpError(408, f"the body did not arrive within {deadline_s:g} s", close=True) from None
