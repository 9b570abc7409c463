"""Connections held open without a key: the head deadline is re-armed after every response
(whatever bytes arrive), and open connections are capped (the longest idle one makes room)."""

from __future__ import annotations

import socket
import time

import pytest
from http_raw import raw_exchange
from service_fakes import SlowRetriever

from evidra.retrieval.service.server import SearchService, ServiceOptions
from evidra.retrieval.service.uvicorn_limits import connection_cap

# requests answered without their body being read, each followed by one byte of that body
UNREAD_BODY = {
    "401": b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n",
    "health": b"GET /health HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n",
    "404": b"POST /nowhere HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n",
    "405": b"PUT /search HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n",
}


def _address(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").split(":")
    return host, int(port)


def _attack(url: str, head: bytes) -> socket.socket:
    """A connection that got its answer and then sent one byte of the body nobody reads."""
    s = socket.create_connection(_address(url), timeout=10)
    s.sendall(head)
    assert s.recv(65536).startswith(b"HTTP/1.1 ")
    s.sendall(b"x")
    return s


def _held_s(s: socket.socket, limit: float) -> float:
    """Seconds until the server closes ``s`` (``limit`` when it is still open then)."""
    s.settimeout(limit)
    start = time.monotonic()
    try:
        while s.recv(1024):
            pass
    except TimeoutError:
        return limit
    except OSError:
        pass
    return time.monotonic() - start


@pytest.mark.parametrize("kind", sorted(UNREAD_BODY))
def test_a_byte_after_an_answer_does_not_hold_the_connection(kind: str) -> None:
    options = ServiceOptions(api_key="k", idle_timeout_s=1, access_log=False)
    with SearchService(SlowRetriever(), options).running() as url, _attack(url, UNREAD_BODY[kind]) as s:
        assert _held_s(s, 10) < 3  # was: open until the client left


def test_health_answers_while_attackers_fill_the_connection_cap() -> None:
    options = ServiceOptions(api_key="k", idle_timeout_s=30, access_log=False, max_connections=8)
    with SearchService(SlowRetriever(), options).running() as url:
        attackers = [_attack(url, UNREAD_BODY["401"]) for _ in range(40)]
        start = time.monotonic()
        status, _, body = raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")
        assert status == 200 and b'"ok"' in body and time.monotonic() - start < 2
        closed = sum(_held_s(s, 0.5) < 0.5 for s in attackers)
        assert closed >= 40 - 8  # the longest idle made room for each newcomer
        for s in attackers:
            s.close()


def test_at_the_cap_with_every_connection_busy_a_newcomer_gets_503() -> None:
    options = ServiceOptions(access_log=False, max_connections=8, max_wait_ms=0, max_batch=1)
    body = b'{"queries": ["slow"], "k": 1}'
    request = b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
    with SearchService(SlowRetriever(per_query_s=0.5), options).running() as url:
        busy = [socket.create_connection(_address(url), timeout=10) for _ in range(8)]
        for s in busy:
            s.sendall(request)  # eight searches of 0.5 s, one at a time: all in flight for a while
        time.sleep(0.3)
        status, _, answer = raw_exchange(url, b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        assert status == 503 and b"too many open connections" in answer
        for s in busy:
            assert s.recv(65536).startswith(b"HTTP/1.1 200")  # the busy ones were never cut
            s.close()


def test_the_cap_leaves_half_the_descriptors_free() -> None:
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert connection_cap(10**9) in (soft // 2, 10**9) and connection_cap(3) == 8
