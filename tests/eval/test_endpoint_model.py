"""The harness with an OpenAI-compatible endpoint (a fake server on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from evidra.core.geometry import vision_spec
from evidra.core.types import Sample
from evidra.eval.runner import EndpointModel, RunConfig, run_eval
from evidra.models.endpoint import ChatEndpoint

pytest.importorskip("httpx")


class _Echo(BaseHTTPRequestHandler):
    """Answers "<think>..</think><answer>{yes}</answer>" to questions with "yes" in them."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        text = " ".join(p.get("text", "") for m in body["messages"] for p in m["content"])
        answer = "{yes}" if "yes" in text.lower() else "{no}"
        finish = "length" if "long" in text else "stop"
        message = {"content": f"<think>.</think><answer>{answer}</answer>"}
        reply = {
            "choices": [{"message": message, "finish_reason": finish}],
            "usage": {"completion_tokens": 3},
        }
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def endpoint() -> Iterator[ChatEndpoint]:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield ChatEndpoint(f"http://127.0.0.1:{srv.server_address[1]}/v1", "fake", retries=0)
    srv.shutdown()
    srv.server_close()


def test_endpoint_model_scores_and_finish(endpoint: ChatEndpoint, tmp_path: Path) -> None:
    samples = [
        Sample("a", "Say yes?", ("yes",), dataset="tunnel_objreid"),
        Sample("b", "Say no?", ("yes",), dataset="tunnel_objreid"),
        Sample("c", "A long yes?", ("yes",), dataset="tunnel_objreid"),
    ]
    model = EndpointModel(endpoint, vision_spec("qwen2_5_vl"), workers=2)
    preds = run_eval(samples, model, RunConfig("tv", "direct", "fake"), tmp_path / "p.jsonl")
    assert [p.answer for p in preds] == ["{yes}", "{no}", "{yes}"]
    assert [p.scores["synthetic_accuracy"] for p in preds] == [1.0, 0.0, 1.0]
    assert [p.finished for p in preds] == [True, True, False]  # finish_reason "length" is not finished
    assert preds[0].n_tokens == 3 and preds[0].latency_s > 0
