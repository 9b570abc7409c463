"""The vLLM server client (``rollout.vllm.mode: server``) against a hostile fake ``vllm serve`` on
127.0.0.1: every oversized, compressed, deep, non-finite or misshapen reply is one ``VLLMError``
line, and a completion's shape is checked before its tokens are used."""

from __future__ import annotations

import threading
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from evidra.models.vllm_backend import VLLMConfig, VLLMError
from evidra.models.vllm_server import MAX_REPLY_BYTES, VLLMServerBackend, completion_fields
from hostile_http import gzip_bomb

MODELS = b'{"data": [{"id": "policy"}]}'
COMPLETION = (
    b'{"choices": [{"token_ids": [5, 6], "logprobs": {"token_logprobs": [-0.5, -1.0]}, "stop_reason": null}]}'
)


@pytest.fixture
def vllm_fake() -> Iterator[tuple[str, list[tuple[bytes, dict[str, str]]]]]:
    """Answers each request (GET or POST, any path) with the next scripted (body, headers)."""
    replies: list[tuple[bytes, dict[str, str]]] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def _reply(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            body, headers = replies.pop(0)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            for name, value in headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _reply

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", replies
    httpd.shutdown()
    httpd.server_close()


def _backend(url: str) -> VLLMServerBackend:
    return VLLMServerBackend(None, VLLMConfig(mode="server", server_url=url, timeout_s=5.0))


HOSTILE = {  # name: (body, headers, words)
    "nested 200k deep": (b"[" * 200_000 + b"]" * 200_000, {}, "nested too deeply"),
    "Infinity": (b'{"data": Infinity}', {}, "Infinity"),
    "brotli": (b"\x0b\x02\x80{}\x03", {"Content-Encoding": "br"}, "Content-Encoding 'br'"),
    "gzip bomb": (
        gzip_bomb(2 * MAX_REPLY_BYTES),
        {"Content-Encoding": "gzip"},
        f"over the {MAX_REPLY_BYTES}-byte cap",
    ),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_completion_reply_is_one_error(name: str, vllm_fake: tuple[str, list[Any]]) -> None:
    url, replies = vllm_fake
    body, headers, words = HOSTILE[name]
    replies += [(MODELS, {}), (body, headers)]
    backend = _backend(url)
    assert backend.model_name == "policy"
    tracemalloc.start()
    try:
        with pytest.raises(VLLMError, match=words) as info:
            backend._post("/v1/completions", {})
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(info.value) and peak < 3 * MAX_REPLY_BYTES


@pytest.mark.parametrize(
    "body", [b"[]", b'{"data": []}', b'{"data": [{"name": 1}]}', b"[" * 200_000, b'{"data": NaN}']
)
def test_a_hostile_model_list_is_one_error(body: bytes, vllm_fake: tuple[str, list[Any]]) -> None:
    url, replies = vllm_fake
    replies.append((body, {}))
    with pytest.raises(VLLMError, match=f"no vLLM server at rollout.vllm.server_url={url} ") as info:
        _backend(url)
    assert "\n" not in str(info.value)


def test_a_completion_is_checked_before_its_tokens_are_used(vllm_fake: tuple[str, list[Any]]) -> None:
    url, replies = vllm_fake
    replies += [(MODELS, {}), (COMPLETION, {})]
    assert completion_fields(_backend(url)._post("/v1/completions", {}), url) == ([5, 6], [-0.5, -1.0], False)
    bad = [
        ({"choices": []}, "IndexError"),
        ({"choices": [{"token_ids": [1], "logprobs": None}]}, "TypeError"),
        (
            {"choices": [{"token_ids": ["a"], "logprobs": {"token_logprobs": [0.0]}}]},
            "not a list of integers",
        ),
        ({"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [0.0]}}]}, "as long as token_ids"),
        ({"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": ["x"]}}]}, "ValueError"),
        ({"choices": [{"logprobs": {}}]}, "returned no token_ids"),
    ]
    for data, words in bad:
        with pytest.raises(VLLMError, match=words):
            completion_fields(data, url)
