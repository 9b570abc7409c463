"""The search service under hostile clients: caps, malformed requests, fairness, keys, exposure."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from typing import Any

import pytest
from http_raw import raw_exchange
from http_raw import raw_request as _raw
from service_fakes import SlowRetriever

from evidra.core.errors import InvalidInputError
from evidra.retrieval.interfaces import Hit
from evidra.retrieval.service.client import SearchClient, SearchServiceError
from evidra.retrieval.service.server import API_KEY_ENV, BATCH_RECORD, MAX_HEAD, SearchService, ServiceOptions


def _post(url: str, body: bytes, headers: str = "") -> tuple[int, dict[str, Any]]:
    return _raw(
        url,
        b"POST /search HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
        + headers.encode()
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body,
    )


def test_every_malformed_request_gets_a_short_4xx(caplog: pytest.LogCaptureFixture) -> None:
    options = ServiceOptions(max_queries=4, max_query_chars=50)
    with SearchService(SlowRetriever(), options).running() as url:
        cases: list[tuple[bytes, int, str]] = [
            (json.dumps({"queries": ["q"] * 5}).encode(), 413, "5 queries in one request, over the cap of 4"),
            (json.dumps({"queries": ["x" * 51]}).encode(), 413, "a query of 51 characters, over the cap"),
            (b'{"queries": ["\\ud800"]}', 400, "strings of valid Unicode"),
            (b'{"queries": ["a"], "k": ' + b"9" * 5000 + b"}", 400, "a number is too long"),
            (
                b'{"queries": ["a"], "k": ' + b"9" * 4000 + b"}",
                400,
                '"k" must be an integer in 1..100, got 999',
            ),
            (b"[" * 100_000 + b"]" * 100_000, 400, "nested too deeply"),
            (b'{"queries": ["a"], "k": [[[[[[[[[[]]]]]]]]]]}', 400, '"k" must be'),
            (b'{"queries": ["\xc3\x28"]}', 400, "not UTF-8"),
            (b"{oops", 400, "body is not valid JSON (Expecting property name"),
            (b'{"queries": ["explode"]}', 500, "internal error; the service log has the details"),
        ]
        for body, status, fragment in cases:
            got_status, got = _post(url, body)
            assert (got_status, fragment in got["error"]) == (status, True), (body[:40], got)
            assert len(got["error"]) < 120 and "Traceback" not in got["error"]
        assert "secret internal detail" in caplog.text  # logged for the operator, not sent
        head = b"POST /search HTTP/1.1\r\nHost: t\r\n"
        for raw in [  # refused by uvicorn's h11 parser before the app sees them
            head + b"Content-Length: -5\r\n\r\n",
            head + b"Content-Length: 1_0\r\n\r\n",
            head + b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n",
            head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n",  # not a chunk size
            b"GARBAGE\r\n\r\n",
            b"GET /health HTTP/1.1\r\n\r\n",  # HTTP/1.1 without Host
            b"GET /" + b"a" * (MAX_HEAD + 100),  # a head still incomplete past MAX_HEAD
            b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: " + b"b" * (MAX_HEAD + 100),
        ]:
            status, kind, text = raw_exchange(url, raw)  # (chunked when the body had begun)
            assert (status, kind) == (400, "text/plain; charset=utf-8"), raw[:40]
            assert b"Invalid HTTP request received." in text and len(text) < 50, text
        for raw, status, fragment in [
            (head + b"Content-Length: 99999999\r\n\r\n", 413, "a body of 99999999 bytes exceeds the limit"),
            (b"GET /health HTTP/1.1\r\nHost: t\r\n" + b"X-A: 1\r\n" * 64 + b"\r\n", 431, "more than 64"),
        ]:
            got_status, got = _raw(url, raw)
            assert (got_status, fragment in got["error"]) == (status, True), (raw[:40], got)
        assert _post(url, b'{"queries": ["fine"]}')[0] == 200  # the service is still up


def test_a_large_request_does_not_starve_a_small_one() -> None:
    retriever = SlowRetriever(per_query_s=0.002)
    options = ServiceOptions(max_batch=8, max_wait_ms=1, max_queries=2000)
    with SearchService(retriever, options).running() as url:
        big = threading.Thread(target=_post, args=(url, json.dumps({"queries": ["q"] * 1000}).encode()))
        big.start()
        time.sleep(0.2)  # the big request is being searched, 8 queries at a time
        start = time.perf_counter()
        with SearchClient(url, timeout=10) as client:
            assert client.search(["small"], k=1) == [[Hit("p-small", 1.0, "")]]
        waited = time.perf_counter() - start
        big.join()
    # the big request alone takes 2 s; the small one waits for at most a slice or two of it
    assert waited < 0.5, waited
    assert retriever.searched == 1001


def test_a_disconnected_clients_queries_are_dropped() -> None:
    retriever = SlowRetriever(per_query_s=0.002)
    options = ServiceOptions(max_batch=8, max_wait_ms=1, max_queries=2000)
    with SearchService(retriever, options).running() as url:
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps({"queries": ["q"] * 1000}).encode()
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.1)
        time.sleep(0.4)  # well within the 2 s the request would take
        with SearchClient(url, timeout=10) as client:
            client.search(["after"], k=1)
    assert retriever.searched < 400  # the rest of the 1000 was never searched


def test_the_batch_record_is_bounded() -> None:
    service = SearchService(SlowRetriever(), ServiceOptions(max_batch=1, max_queries=2 * BATCH_RECORD))
    with service.running() as url, SearchClient(url, timeout=30) as client:
        client.search([f"q{i}" for i in range(BATCH_RECORD + 10)], k=1)
    assert len(service.batches) == BATCH_RECORD


def test_api_key_is_required_when_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(API_KEY_ENV, raising=False)
    service = SearchService(SlowRetriever(), ServiceOptions(api_key="s3cret"))
    with service.running() as url:
        with pytest.raises(SearchServiceError, match="401: missing or wrong API key"):
            SearchClient(url).search(["a"])
        with pytest.raises(SearchServiceError, match="401"):
            SearchClient(url, api_key="wrong").search(["a"])
        assert SearchClient(url, api_key="s3cret").search(["a"], k=1) == [[Hit("p-a", 1.0, "")]]
        monkeypatch.setenv(API_KEY_ENV, "s3cret")
        assert SearchClient(url).search(["a"], k=1) == [[Hit("p-a", 1.0, "")]]  # read from the env
        assert _raw(url, b"GET /health HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n")[0] == 200
    assert "s3cret" not in repr(service.options)
    with pytest.raises(InvalidInputError, match="API key is empty"):
        ServiceOptions(api_key=" ")


def test_binding_beyond_loopback_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING), SearchService(SlowRetriever()).running("127.0.0.1"):
        pass
    assert "reachable from other machines" not in caplog.text
    with caplog.at_level(logging.WARNING), SearchService(SlowRetriever()).running("0.0.0.0"):
        pass
    expected = "bound to 0.0.0.0 is reachable from other machines: anyone who can reach it can search"
    assert f"{expected}; set {API_KEY_ENV} to require a key" in caplog.text


def test_every_waiting_request_gets_a_share_of_the_next_batch() -> None:
    from evidra.retrieval.service.server import _Pending, _shares

    def pending(n: int) -> _Pending:
        return _Pending(["q"] * n, 5, [[]] * n, None)  # type: ignore[arg-type]

    shares = [n for _, n in _shares([pending(200), pending(200), pending(1), pending(3)], 32)]
    assert shares == [14, 14, 1, 3] and sum(shares) == 32  # the small ones whole, the rest split
    many = [n for _, n in _shares([pending(5) for _ in range(40)], 32)]
    assert sum(many) == 32 and max(many) == 1  # more requests than slots: one query each, in order
