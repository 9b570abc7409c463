"""Running ``evidra serve``: uvicorn with the search service's guarded h11 protocol (head
deadline re-armed after every response, capped connections; ``evidra.retrieval.serving``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from evidra.app.http import API_KEY_ENV, ServeOptions
from evidra.retrieval.server import ServiceError, bind_tcp, is_loopback, on_a_thread

if TYPE_CHECKING:
    import socket

    import uvicorn

    from evidra.app.workspace import Workspace

logger = logging.getLogger(__name__)


def _listen(host: str, port: int, options: ServeOptions) -> tuple[socket.socket, str]:
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
            if options.api_key
            else f"anyone who can reach it can read and add documents; set {API_KEY_ENV} to require a key"
        )
        logger.warning("evidra serve bound to %s is reachable from other machines: %s", host, guard)
    return sock, url


def _server(workspace: Workspace, options: ServeOptions, host: str) -> uvicorn.Server:
    from evidra.app.web import build_app
    from evidra.retrieval.serving import make_server

    app = build_app(workspace, options, loopback_only=is_loopback(host))
    return make_server(app, idle_timeout_s=options.idle_timeout_s, max_connections=options.max_connections)


def serve_forever(
    workspace: Workspace,
    options: ServeOptions,
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    ready: Callable[[str], None] | None = None,
) -> None:
    """Serve on this thread until SIGINT or SIGTERM; ``ready`` gets the URL once bound."""
    sock, url = _listen(host, port, options)
    with sock:
        if ready is not None:
            ready(url)
        _server(workspace, options, host).run(sockets=[sock])


@contextlib.contextmanager
def running(
    workspace: Workspace, options: ServeOptions, host: str = "127.0.0.1", port: int = 0
) -> Iterator[str]:
    """The app on a background thread; yields its base URL, stops on exit (tests, notebooks)."""
    sock, url = _listen(host, port, options)
    with on_a_thread(_server(workspace, options, host), sock, url, "evidra serve"):
        yield url
