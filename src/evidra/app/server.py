"""Running ``evidra serve``: uvicorn with the search service's guarded h11 protocol (head
deadline re-armed after every response, capped connections; ``evidra.retrieval.service.uvicorn_limits``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from evidra.app.http import API_KEY_ENV, ServeOptions
from evidra.retrieval.service.server import is_loopback, listen, on_a_thread

if TYPE_CHECKING:
    import socket

    import uvicorn

    from evidra.app.workspace import Workspace

logger = logging.getLogger(__name__)


def _listen(host: str, port: int, options: ServeOptions) -> tuple[socket.socket, str]:
    return listen(host, port, "evidra serve", options.api_key, "read and add documents", key_env=API_KEY_ENV)


def _server(workspace: Workspace, options: ServeOptions, host: str) -> uvicorn.Server:
    from evidra.app.web import build_app
    from evidra.retrieval.service.uvicorn_limits import make_server

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
