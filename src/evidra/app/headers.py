"""Headers every response of ``evidra serve`` carries, whatever answered it (a page, the JSON API,
a refusal, a server error): the browser runs no script and no plugin the app did not serve itself,
and takes every body for the media type it is sent as.

* ``X-Content-Type-Options: nosniff``: a page image is shown as the image type it is sent as
  (``Workspace.image_file`` tells it by the file's first bytes), never sniffed into HTML or SVG.
* ``Content-Security-Policy``: scripts, styles, images and requests only from the app's own origin
  (its one script file; no inline script, which the templates do not use), no plugins
  (``object-src``), no framing by another site (``frame-ancestors``, and ``X-Frame-Options`` for
  older browsers), no ``<base>`` that redirects relative links, forms only to the app.
* ``Referrer-Policy: same-origin``: a link out of the app does not carry its page's address.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    )
)
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
}


class SecurityHeaders:
    """ASGI wrapper setting ``SECURITY_HEADERS`` on every HTTP response of ``app``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)
