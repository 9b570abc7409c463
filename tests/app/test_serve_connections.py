"""``evidra serve`` under the held-open attack (raw sockets): one byte after an answer to a request
whose body was never read no longer holds the connection, and /health answers past the cap."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace

UNREAD = {
    "401": b"POST /api/ask HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n",
    "health": b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\n",
    "421": b"GET /api/documents HTTP/1.1\r\nHost: evil.example\r\nContent-Length: 10\r\n\r\n",
}


def _attack(address: tuple[str, int], head: bytes) -> socket.socket:
    s = socket.create_connection(address, timeout=10)
    s.sendall(head)
    assert s.recv(65536).startswith(b"HTTP/1.1 ")
    s.sendall(b"x")
    return s


def _closed_within(s: socket.socket, limit: float) -> bool:
    s.settimeout(limit)
    try:
        while s.recv(1024):
            pass
    except TimeoutError:
        return False
    except OSError:
        pass
    return True


@pytest.fixture
def address(tmp_path: Path) -> object:
    workspace = Workspace(tmp_path / "store")
    workspace.start_sync()
    options = ServeOptions(api_key="k", idle_timeout_s=1, max_connections=8, access_log=False)
    try:
        with running(workspace, options) as url:
            host, port = url.removeprefix("http://").split(":")
            yield host, int(port)
    finally:
        workspace.close()


@pytest.mark.parametrize("kind", sorted(UNREAD))
def test_a_byte_after_an_answer_does_not_hold_the_connection(address: tuple[str, int], kind: str) -> None:
    with _attack(address, UNREAD[kind]) as s:
        assert _closed_within(s, 4)


def test_health_answers_with_more_attackers_than_the_cap(address: tuple[str, int]) -> None:
    attackers = [_attack(address, UNREAD["401"]) for _ in range(30)]
    start = time.monotonic()
    with socket.create_connection(address, timeout=5) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 200")
    assert time.monotonic() - start < 2
    for s in attackers:
        s.close()
