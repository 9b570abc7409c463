"""``SearchClient`` / ``AsyncSearchClient`` and the ``/health`` probe against hostile servers on
127.0.0.1 (the scripted fake of tests/conftest.py): the index key goes only where the user said,
an echoed key is redacted, every malformed, oversized or trickling reply is one
``SearchServiceError`` line within the call's total timeout."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.http.replies import MAX_REPLY_BYTES
from evidra.retrieval.lifecycle.attach import _open_url
from evidra.retrieval.lifecycle.index_folder import open_searcher
from evidra.retrieval.service.client import AsyncSearchClient, SearchClient, SearchServiceError
from evidra.safeio.keys import KeyPolicy
from hostile_http import gzip_bomb

SECRET = "ix-0123456789SECRET"
GOOD = {"results": [[{"page_id": "d-p0001", "score": 1.5}]]}


def _search(url: str, sync: bool, where: list[str] | None = None, **kw: Any) -> Any:
    if sync:
        with SearchClient(url, **kw) as client:
            return client.search(["q"], k=1, where=where)

    async def run() -> Any:
        async with AsyncSearchClient(url, **kw) as client:
            return await client.search(["q"], k=1, where=where)

    return asyncio.run(run())


HOSTILE = {  # name: (body, headers, words of the error)
    "no results": (b'{"hits": []}', {}, "without a 'results' list of 1 hit lists"),
    "results of another length": (b'{"results": [[], []]}', {}, "without a 'results' list"),
    "nested 200k deep": (b"[" * 200_000 + b"]" * 200_000, {}, "nested too deeply"),
    "score Infinity": (b'{"results": [[{"page_id": "p", "score": Infinity}]]}', {}, "Infinity"),
    "score 1e999": (b'{"results": [[{"page_id": "p", "score": 1e999}]]}', {}, "overflows"),
    "hit without page_id": (b'{"results": [[{"score": 1}]]}', {}, "malformed hit (KeyError"),
    "hit not an object": (b'{"results": [[7]]}', {}, "malformed hit (TypeError"),
    "brotli": (b"\x0b\x02\x80{}\x03", {"Content-Encoding": "br"}, "Content-Encoding 'br'"),
    "not JSON": (b"<html>", {}, "not JSON"),
}


@pytest.mark.parametrize("where", [None, ["file=a.pdf"]], ids=["all", "where"])
@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_reply_is_one_search_error(
    name: str, sync: bool, where: list[str] | None, fake_judge: Any
) -> None:
    body, headers, words = HOSTILE[name]
    fake_judge.script = [fake_judge.Scripted(200, body, headers=headers)]
    with pytest.raises(SearchServiceError) as info:
        _search(fake_judge.url, sync, where)
    assert words in str(info.value) and "/v1/search" in str(info.value) and "\n" not in str(info.value)
    sent = fake_judge.requests[-1]["body"]
    assert sent.get("where") == ({"file": ["a.pdf"]} if where else None)


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_a_gzip_bomb_stops_at_the_cap(sync: bool, fake_judge: Any) -> None:
    bomb = gzip_bomb(4 * MAX_REPLY_BYTES, head=b'{"results": [[{"page_id": "')
    fake_judge.script = [fake_judge.Scripted(200, bomb, headers={"Content-Encoding": "gzip"})]
    tracemalloc.start()
    try:
        with pytest.raises(SearchServiceError, match=f"over the {MAX_REPLY_BYTES}-byte cap"):
            _search(fake_judge.url, sync)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * MAX_REPLY_BYTES


def test_a_declared_oversized_reply_is_refused_unread(fake_judge: Any) -> None:
    fake_judge.script = [fake_judge.Scripted(200, json.dumps(GOOD).encode() + b" " * 5000)]
    with pytest.raises(
        SearchServiceError, match=r"of 50\d\d bytes \(its Content-Length\), over the 4096-byte cap"
    ):
        _search(fake_judge.url, True, max_reply_bytes=4096)
    fake_judge.script = [fake_judge.Scripted(200, GOOD)]
    assert _search(fake_judge.url, True, max_reply_bytes=4096)[0][0].page_id == "d-p0001"


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_the_timeout_bounds_a_whole_trickling_call(sync: bool, fake_judge: Any) -> None:
    fake_judge.script = [fake_judge.Scripted(200, trickle_s=0.2)]  # 100 bytes, each read quick, 20 s in all
    start = time.monotonic()
    with pytest.raises(SearchServiceError, match=r"no complete answer within timeout=1 s"):
        _search(fake_judge.url, sync, timeout=1.0)
    assert 0.9 < time.monotonic() - start < 2.5


def test_the_sync_client_is_shared_by_threads_and_closes_its_loop(fake_judge: Any) -> None:
    fake_judge.delay_s = 0.2
    fake_judge.script = [fake_judge.Scripted(200, GOOD) for _ in range(4)]
    earlier = set(threading.enumerate())  # other tests' clients may still have their loops
    client = SearchClient(fake_judge.url)
    found: list[str] = []
    threads = [
        threading.Thread(target=lambda: found.append(client.search(["q"], k=1)[0][0].page_id))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert found == ["d-p0001"] * 4 and fake_judge.max_in_flight >= 3  # one loop, overlapping calls
    loops = [t for t in set(threading.enumerate()) - earlier if t.name == "evidra-search-client"]
    assert len(loops) == 1  # one loop thread served the four threads
    client.close()
    assert not loops[0].is_alive()  # its loop thread is gone (other tests' threads may come and go)


# --- keys -------------------------------------------------------------------------------------


def test_a_recipes_index_url_gets_no_key(
    fake_judge: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("EVIDRA_INDEX_API_KEY", SECRET)
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    caplog.set_level(logging.WARNING)
    fake_judge.script = [fake_judge.Scripted(200, GOOD) for _ in range(4)]
    open_searcher(fake_judge.url).search(["q"], k=1)  # method.index of a recipe
    host = fake_judge.url.split("//")[1].split("/")[0]
    assert f"$EVIDRA_INDEX_API_KEY was not sent to {host}, which method.index names" in caplog.text
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", f"EVIDRA_INDEX_API_KEY@{host}")
    open_searcher(fake_judge.url).search(["q"], k=1)  # ... allowed by the user
    monkeypatch.delenv("EVIDRA_KEY_HOSTS")
    open_searcher(fake_judge.url, key_policy=KeyPolicy()).search(["q"], k=1)  # --index on the command line
    SearchClient(fake_judge.url).search(["q"], k=1)  # a Python caller names its URL
    sent = [r["authorization"] for r in fake_judge.requests]
    assert sent == [None, f"Bearer {SECRET}", f"Bearer {SECRET}", f"Bearer {SECRET}"]
    assert SECRET not in caplog.text


@pytest.mark.parametrize("sync", [True, False], ids=["sync", "async"])
def test_an_echoed_key_is_redacted(sync: bool, fake_judge: Any) -> None:
    fake_judge.script = [fake_judge.Scripted(401, {"error": f"wrong key Bearer {SECRET}" + "!" * 400})]
    with pytest.raises(SearchServiceError) as info:
        _search(fake_judge.url, sync, api_key=SECRET)
    assert "wrong key Bearer ***" in str(info.value) and SECRET[:6] not in str(info.value)
    assert fake_judge.requests[0]["authorization"] == f"Bearer {SECRET}"


# --- the /health probe of `evidra ask --index URL` ------------------------------------------------


@pytest.fixture
def health_server() -> Iterator[tuple[str, list[tuple[bytes, dict[str, str]]]]]:
    replies: list[tuple[bytes, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_GET(self) -> None:
            body, headers = replies.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", replies
    httpd.shutdown()
    httpd.server_close()


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        (b"[1, 2]", {}),
        (b"[" * 200_000, {}),
        (gzip_bomb(64 * 2**20, head=b'{"status": "'), {"Content-Encoding": "gzip"}),
    ],
    ids=["a list", "nested 200k deep", "gzip bomb"],
)
def test_a_hostile_health_reply_is_one_line(
    body: bytes, headers: dict[str, str], health_server: tuple[str, list[Any]]
) -> None:
    url, replies = health_server
    replies.append((body, headers))
    with pytest.raises(InvalidInputError, match=f"index URL {url} ") as info:
        _open_url(url)
    assert "\n" not in str(info.value)
