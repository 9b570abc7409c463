"""Teacher distillation against a fake OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from evidra.core.types import Message, Page, Sample, TextPart
from evidra.data.construction.distill import accepted_records, distill
from evidra.models.endpoint import ChatEndpoint
from evidra.openai.client import to_openai

pytest.importorskip("httpx")


class FakeTeacher(ThreadingHTTPServer):
    """Replies by the question found in the prompt; records requests and peak concurrency."""

    def __init__(self, replies: dict[str, str]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.replies = replies
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.peak = 0
        self.lock = threading.Lock()


class _Handler(BaseHTTPRequestHandler):
    server: FakeTeacher

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        with srv.lock:
            srv.requests.append(body)
            srv.in_flight += 1
            srv.peak = max(srv.peak, srv.in_flight)
        time.sleep(0.05)
        text = " ".join(p.get("text", "") for m in body["messages"] for p in m["content"])
        reply = next((r for key, r in srv.replies.items() if key in text), "I do not know")
        if "fail" in text:
            self.send_response(500)
            self.end_headers()
        else:
            data = json.dumps(
                {
                    "choices": [{"message": {"content": reply}, "finish_reason": "stop"}],
                    "usage": {"completion_tokens": 5},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        with srv.lock:
            srv.in_flight -= 1


@pytest.fixture
def serve() -> Iterator[Any]:
    servers: list[FakeTeacher] = []

    def start(replies: dict[str, str]) -> tuple[FakeTeacher, ChatEndpoint]:
        srv = FakeTeacher(replies)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv, ChatEndpoint(f"http://127.0.0.1:{srv.server_address[1]}/v1", "teacher", retries=0)

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


def _method(name: str) -> dict[str, Any]:
    """What ``evidra data distill --method NAME`` passes: the method's paradigm and filter."""
    from evidra.methods import METHODS
    from evidra.paradigms import PARADIGMS

    method = METHODS.get(name)
    return {"method": name, "paradigm": PARADIGMS.get(method.paradigm)(), "keep": method.distill}


def _samples(tmp_path: Path) -> list[Sample]:
    img = tmp_path / "p.png"
    Image.new("RGB", (40, 30), "white").save(img)
    page = Page("p1", str(img), 40, 30)
    return [
        Sample("q1", "Who founded Acme?", ("Jane Doe",), pages=(page,), gold_pages=("p1",)),
        Sample("q2", "When was Acme founded?", ("1901",), pages=(page,), gold_pages=("p1",)),
        Sample("q3", "Where is Acme?", ("Porto",), pages=(page,), gold_pages=("p1",)),
        Sample("q4", "Please fail here?", ("x",), pages=(page,), gold_pages=("p1",)),
    ]


def test_lat_recall_filter_resume_and_concurrency(serve: Any, tmp_path: Path) -> None:
    srv, teacher = serve(
        {
            "Who founded": "<think>It says Jane [1, (1, 2), (3, 4)].</think>\n<answer>Jane Doe</answer>",
            "When was": "<think>x</think>\n<answer>founded in 1890 or so</answer>",  # recall 0
            "Where is": "<think>x</think>\n<answer>Porto Portugal</answer>",  # recall 1/1
        }
    )
    out = tmp_path / "lat.jsonl"
    report = distill(_samples(tmp_path), teacher, out, **_method("lat"), gamma=0.5, concurrency=2)
    assert (report.attempted, report.accepted, report.failed) == (4, 2, 1)
    assert 1 < srv.peak <= 2  # bounded concurrency, and really concurrent
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {"q1", "q2", "q3"}  # the failed request is not written: a rerun retries it
    assert rows["q2"]["accepted"] is False and rows["q2"]["meta"]["recall"] == 0.0
    assert {r["id"] for r in accepted_records(out)} == {"q1", "q3"}
    image_parts = [p for m in srv.requests[0]["messages"] for p in m["content"] if p["type"] == "image_url"]
    assert image_parts and image_parts[0]["image_url"]["url"].startswith("data:image/png;base64,")
    before = len(srv.requests)
    again = distill(_samples(tmp_path), teacher, out, **_method("lat"), concurrency=2)
    assert (again.skipped, again.attempted) == (3, 1) and len(srv.requests) == before + 1  # only q4 retried


def test_evisrag_keeps_right_answers_with_evidence(serve: Any, tmp_path: Path) -> None:
    _, teacher = serve(
        {
            "Who founded": "<observe>a page</observe><evidence>[1]: Jane Doe founded Acme</evidence>"
            "<think>so</think><answer>Jane Doe</answer>",
            "When was": "<observe>a</observe><evidence>[1]: no relevant information</evidence>"
            "<think>t</think><answer>insufficient to answer</answer>",
        }
    )
    out = tmp_path / "ev.jsonl"
    distill(_samples(tmp_path)[:2], teacher, out, **_method("evisrag"))
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["q1"]["accepted"] and rows["q1"]["meta"]["evidence"] == "[1]: Jane Doe founded Acme"
    assert not rows["q2"]["accepted"]  # sufficient context but the teacher declined


def test_vragrl_regrounds_boxes_with_a_second_model(serve: Any, tmp_path: Path) -> None:
    _, teacher = serve(
        {
            "Who founded": "<think>zoom on the header</think><bbox>[0, 0, 5, 5]</bbox>"
            "<think>done</think><answer>Jane Doe</answer>"
        }
    )
    _, annotator = serve({"zoom on the header": "[2, 3, 30, 20]"})
    out = tmp_path / "vrag.jsonl"
    distill(_samples(tmp_path)[:1], teacher, out, **_method("vragrl"), annotator=annotator)
    (row,) = map(json.loads, out.read_text().splitlines())
    assert row["accepted"] and "<bbox>[2, 3, 30, 20]</bbox>" in row["response"]
    assert row["meta"]["regrounded"] == [{"original": "[0, 0, 5, 5]", "regrounded": "[2, 3, 30, 20]"}]


def test_to_openai_parts_in_order() -> None:
    msgs = to_openai([Message("user", (TextPart("a"), TextPart("b")))])
    assert msgs == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]


def test_progress_counts_resumed_samples_first_then_one_per_sample(serve: Any, tmp_path: Path) -> None:
    _, teacher = serve({"Who founded": "<answer>Jane Doe</answer>"})
    out, steps = tmp_path / "lat.jsonl", []
    distill(_samples(tmp_path)[:3], teacher, out, **_method("lat"), concurrency=2, progress=steps.append)
    assert steps == [1, 1, 1]  # nothing in out yet: one step per sample as it finishes
    steps.clear()
    distill(_samples(tmp_path), teacher, out, **_method("lat"), concurrency=2, progress=steps.append)
    assert steps == [3, 1]  # q1-q3 are in out; q4 (a failed request) still counts as done this run
