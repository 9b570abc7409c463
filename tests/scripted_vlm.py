"""A scripted OpenAI-compatible VLM server on a loopback port, for the tests of answers made by an
endpoint (tests/models/test_endpoint_answers.py, tests/cli/test_ask_endpoint.py,
tests/app/test_endpoint_serve.py).

Each request takes the next ``Reply`` of ``replies`` (the last one repeats) and is recorded with
its ``Authorization`` header and body. A reply can be a chat completion with given text, an HTTP
error, a reply cut off mid-body (the connection drops), or a 400 whenever the request carries
``response_format`` (a server that does not do structured output).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    text: str = ""  # the completion's content
    status: int = 200
    error: str = ""  # the message of an error reply
    cut: bool = False  # send half the body, then drop the connection
    refuse_schema: bool = False  # a 400 when the request asks for response_format
    stream_error: str = ""  # streamed: an error event in place of the second half of the text


@dataclass
class ScriptedVLM:
    url: str  # base URL, .../v1
    replies: list[Reply] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: dict[str, Any], authorization: str | None) -> Reply:
        with self.lock:
            self.requests.append({"authorization": authorization, "body": body})
            return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


def completion(text: str, finish: str = "stop") -> bytes:
    choice = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}
    return json.dumps({"choices": [choice], "usage": {"completion_tokens": 7}}).encode()


def _events(reply: Reply) -> list[bytes]:
    """The reply as server-sent ``chat.completion.chunk`` events, eight characters each."""
    pieces = [reply.text[i : i + 8] for i in range(0, len(reply.text), 8)]
    chunks: list[dict[str, Any]] = [{"choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    events = [b"data: " + json.dumps(c).encode() + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
    half = max(1, len(pieces) // 2)
    if reply.stream_error:
        error = {"error": {"message": reply.stream_error, "code": 500}}
        return [*events[:half], b"data: " + json.dumps(error).encode() + b"\n\n"]
    return events[:half] if reply.cut else events


def _stream(handler: BaseHTTPRequestHandler, reply: Reply) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.end_headers()
    for event in _events(reply):
        handler.wfile.write(event)
        handler.wfile.flush()
    handler.close_connection = True  # the body ends with the connection (HTTP/1.0)


def _respond(handler: BaseHTTPRequestHandler, reply: Reply, body: dict[str, Any]) -> None:
    status, data = reply.status, completion(reply.text)
    if reply.refuse_schema and "response_format" in body:
        status = 400
    if status == 200 and body.get("stream"):
        _stream(handler, reply)
        return
    if status != 200:
        message = reply.error or "response_format is not supported by this server"
        data = json.dumps({"error": {"message": message, "code": status}}).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data[: len(data) // 2] if reply.cut else data)
    if reply.cut:
        handler.close_connection = True


@contextmanager
def scripted_vlm(*replies: Reply) -> Iterator[ScriptedVLM]:
    """The server, answering with ``replies`` in turn (the last one repeats)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            return

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            _respond(self, state.take(body, self.headers.get("Authorization")), body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    state = ScriptedVLM(f"http://127.0.0.1:{httpd.server_address[1]}/v1", list(replies))
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()
