"""The search service on starlette + uvicorn: chunked bodies, access log, deadlines, lifecycle, CLI."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from http_raw import raw_request as _raw
from service_fakes import SlowRetriever

import evidra
from evidra.corpus import PageStore
from evidra.retrieval.interfaces import Hit
from evidra.retrieval.lifecycle.index_folder import build_index
from evidra.retrieval.service.client import SearchClient, SearchServiceError
from evidra.retrieval.service.server import SearchService, ServiceError, ServiceOptions

ACCESS = "evidra.retrieval.access"


def _chunked(*parts: bytes) -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


def test_chunked_bodies_are_searched_and_capped() -> None:
    with SearchService(SlowRetriever(), ServiceOptions(max_body=200)).running() as url:
        with httpx.Client(timeout=10) as client:  # content of unknown length goes out chunked
            parts = [b'{"queries": ', b'["red", "fox"],', b' "k": 1}']
            response = client.post(url + "/search", content=iter(parts))
        assert response.request.headers["transfer-encoding"] == "chunked"
        assert response.json() == {
            "results": [
                [{"page_id": "p-red", "score": 1.0, "image_path": ""}],
                [{"page_id": "p-fox", "score": 1.0, "image_path": ""}],
            ]
        }
        body = json.dumps({"queries": ["q" * 150, "r" * 150]}).encode()  # 318 bytes, over 200
        head = b"POST /search HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        status, got = _raw(url, head + _chunked(body[:150], body[150:]))
        assert (status, got) == (413, {"error": "the body exceeds the limit of 200 bytes"})
        assert (
            _raw(url, head.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n") + _chunked(b"{}"))[0] == 400
        )


def _access_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [re.sub(r" \d+\.\d ms$", " MS", r.getMessage()) for r in caplog.records if r.name == ACCESS]


def test_access_log_has_one_line_per_request_and_can_be_off(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=ACCESS):
        with SearchService(SlowRetriever()).running() as url, SearchClient(url, timeout=10) as client:
            client.search(["a", "b"], k=1)
            with pytest.raises(SearchServiceError, match="400"):
                client.search(["a"], k=1000)
            assert httpx.get(url + "/nope", timeout=10).status_code == 404
        assert _access_lines(caplog) == [
            "POST /search 200 queries=2 MS",
            "POST /search 400 queries=0 MS",
            "GET /nope 404 queries=0 MS",
        ]
        caplog.clear()
        quiet = SearchService(SlowRetriever(), ServiceOptions(access_log=False))
        with quiet.running() as url, SearchClient(url, timeout=10) as client:
            client.search(["a"], k=1)
        assert _access_lines(caplog) == []


def test_an_abandoned_request_is_logged_as_499(caplog: pytest.LogCaptureFixture) -> None:
    retriever = SlowRetriever(per_query_s=0.01)
    service = SearchService(retriever, ServiceOptions(max_batch=2, max_wait_ms=1))
    with caplog.at_level(logging.INFO, logger=ACCESS), service.running() as url:
        host, port = url.removeprefix("http://").split(":")
        body = json.dumps({"queries": ["q"] * 100}).encode()
        with socket.create_connection((host, int(port))) as s:
            s.sendall(b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
            time.sleep(0.1)
        time.sleep(0.2)
    assert _access_lines(caplog) == ["POST /search 499 queries=100 MS"]
    assert retriever.searched < 50  # one second of work; well under half of it was done


def _closed_within(sock: socket.socket, seconds: float, trickle: bytes = b"") -> float | None:
    """Seconds until the server closed ``sock`` (sending ``trickle`` every 0.1 s meanwhile), or None."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < seconds:
        try:
            if trickle:
                sock.sendall(trickle)
            assert sock.recv(100) == b"", "the server answered instead of closing"
            return time.monotonic() - start
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.monotonic() - start
    return None


def test_a_request_must_arrive_within_the_idle_timeout() -> None:
    """uvicorn alone would keep a silent or trickling connection open forever."""
    with SearchService(SlowRetriever(), ServiceOptions(idle_timeout_s=1)).running() as url:
        host, port = url.removeprefix("http://").split(":")
        for first, trickle in [(b"", b""), (b"GET /health HTTP/1.1\r\n", b"X-A: 1\r\n")]:
            with socket.create_connection((host, int(port))) as s:
                s.sendall(first)
                waited = _closed_within(s, 4.0, trickle)
            assert waited is not None and 0.8 < waited < 2.5, waited
        slow = b"POST /search HTTP/1.1\r\nHost: t\r\nContent-Length: 50\r\n\r\n{"
        start = time.monotonic()
        status, got = _raw(url, slow)
        assert (status, got) == (408, {"error": "the body did not arrive within 1 s"})
        assert 0.8 < time.monotonic() - start < 2.5
        with SearchClient(url, timeout=10) as client:  # a keep-alive connection outlives a few requests
            for _ in range(3):
                assert client.search(["a"], k=1) == [[Hit("p-a", 1.0, "")]]


def test_health_answers_while_a_search_holds_the_worker() -> None:
    retriever = SlowRetriever(per_query_s=0.5)
    finished = threading.Event()

    def search() -> None:
        SearchClient(url, timeout=10).search(["a", "b"], k=1)
        finished.set()

    with SearchService(retriever, ServiceOptions(max_batch=4)).running() as url:
        thread = threading.Thread(target=search)
        thread.start()
        assert retriever.started.wait(10)  # the search is on the worker now (it takes 1 s there)
        assert httpx.get(url + "/health", timeout=10).json() == {"status": "ok", "pages": -1, "where": False}
        answered_first = not finished.is_set()  # an order of events, not a time bound
        thread.join()
    assert answered_first and finished.is_set()
    assert retriever.searched == 2


def test_keep_alive_answers_do_not_wait_for_delayed_acks() -> None:
    """With Nagle's algorithm on, each answer (headers and body written apart) waited ~40 ms."""
    with SearchService(SlowRetriever()).running() as url, httpx.Client(timeout=10) as client:
        times = []
        for _ in range(9):
            start = time.perf_counter()
            assert client.get(url + "/health").status_code == 200
            times.append(time.perf_counter() - start)
    assert sorted(times)[4] < 0.02, times


def test_a_service_restarts_and_a_taken_port_is_a_one_line_error() -> None:
    service = SearchService(SlowRetriever())
    for word in ("first", "second"):
        with service.running() as url, SearchClient(url, timeout=10) as client:
            assert client.search([word], k=1) == [[Hit(f"p-{word}", 1.0, "")]]
    assert list(service.batches) == [1, 1]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(ServiceError, match=f"cannot listen on 127.0.0.1:{port} .*pick another"):
            service.running(port=port).__enter__()


def test_serve_index_cli_serves_logs_and_stops_on_sigint(
    synth_store: tuple[Path, Any], tmp_path: Path
) -> None:
    store, corpus = synth_store
    engine = build_index(PageStore.open(store).pages(), tmp_path / "bm25", "bm25")
    question = corpus.questions[0].question
    expected = engine.retriever.search([question], k=3)
    src = str(Path(evidra.__file__).parents[1])
    env = {k: v for k, v in os.environ.items() if k != "EVIDRA_INDEX_API_KEY"} | {"PYTHONPATH": src}
    cmd = [sys.executable, "-m", "evidra.cli.main", "serve-index", "--index", str(tmp_path / "bm25")]
    proc = subprocess.Popen(
        [*cmd, "--port", "0"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        found = re.search(r"on (http://127\.0\.0\.1:\d+) \(Ctrl-C stops\)", line)
        assert found, line
        with SearchClient(found.group(1), timeout=10) as client:
            got = client.search([question], k=3)[0]
        assert [h.page_id for h in got] == [h.page_id for h in expected[0]]
        assert [h.score for h in got] == pytest.approx([h.score for h in expected[0]], rel=1e-9)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert re.search(r"evidra\.retrieval\.access: POST /search 200 queries=1 \d+\.\d ms", err), err
    assert "serve-index: interrupted" in err
