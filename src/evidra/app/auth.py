"""Who may use ``evidra serve``: the API key, the browser's session cookie, and same-origin writes.

With a key set (``EVIDRA_APP_API_KEY``), every route but ``/health``, ``/login`` and
``/static`` needs ``Authorization: Bearer <key>`` (as ``serve-index`` does, compared with
``hmac.compare_digest``) or the session cookie ``/login`` sets after the key was typed in: an
HMAC of the key, HttpOnly and SameSite=Strict, so the key itself is never stored in the
browser. A browser page without either is sent to ``/login``; any other request gets 401.

Without a key the app binds to loopback by default; then a request must name this machine in
its ``Host`` header (a page of another site that rebinds its DNS name to 127.0.0.1 names
itself), and a write (POST, DELETE) that carries an ``Origin`` must come from the app's own
origin.
"""

from __future__ import annotations

import hashlib
import hmac
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from evidra.app.http import API_KEY_ENV
from evidra.http.server_limits import error_response

COOKIE = "evidra_session"
OPEN_PATHS = ("/health", "/login", "/static/")
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "[::1]", "::1"}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # reads: any other method writes


def session_token(key: str) -> str:
    """The cookie's value for ``key`` (never the key itself)."""
    return hmac.new(key.encode(), b"evidra serve session", hashlib.sha256).hexdigest()


def key_accepted(request: Request, key: str) -> bool:
    given = request.headers.get("authorization", "").encode("latin-1", "replace")
    if hmac.compare_digest(given, f"Bearer {key}".encode()):
        return True
    cookie = request.cookies.get(COOKIE, "").encode("latin-1", "replace")
    return hmac.compare_digest(cookie, session_token(key).encode())


def _host_name(host_header: str) -> str:
    return urlsplit(f"//{host_header}").hostname or ""


class Guard:
    """ASGI middleware applying the rules of the module docstring."""

    def __init__(self, app: ASGIApp, *, key: str | None, loopback_only: bool) -> None:
        self.app, self.key, self.loopback_only = app, key, loopback_only

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refusal = self._refusal(request)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, request: Request) -> Response | None:
        host = request.headers.get("host", "")
        if self.loopback_only and _host_name(host) not in LOOPBACK_NAMES:
            return error_response(421, f"this server answers to localhost only, not {host[:80]!r}")
        origin = request.headers.get("origin")
        if request.method not in SAFE_METHODS and origin and urlsplit(origin).netloc != host:
            return error_response(403, f"a write from another origin ({origin[:80]}) is refused")
        path = request.url.path
        if self.key is None or path.startswith(OPEN_PATHS) or key_accepted(request, self.key):
            return None
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse("/login", status_code=303)
        return error_response(401, f"missing or wrong API key; send Authorization: Bearer ${API_KEY_ENV}")
