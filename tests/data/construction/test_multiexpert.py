"""VRAG-RL multi-expert sampling against two local fake teachers on a three-page corpus."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import VRAG_MAX_PIXELS, VRAG_MIN_PIXELS, process_image_size
from evidra.core.types import Box, ImagePart, Page, Sample, Word
from evidra.data.construction.multiexpert import MultiExpertConfig, multiexpert
from evidra.env.search import SearchEnv, bm25_searcher
from evidra.env.single_turn import SingleTurnEnv
from evidra.models.endpoint import ChatEndpoint
from evidra.paradigms.direct import Direct
from evidra.rl.sft.files import read_sft_data

pytest.importorskip("httpx")

Reply = Callable[[dict[str, Any]], str]


class Fake(ThreadingHTTPServer):
    def __init__(self, reply: Reply) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply = reply
        self.requests: list[dict[str, Any]] = []


class _Handler(BaseHTTPRequestHandler):
    server: Fake

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(body)
        data = json.dumps({"choices": [{"message": {"content": self.server.reply(body)}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def serve() -> Iterator[Callable[[Reply], tuple[Fake, ChatEndpoint]]]:
    servers: list[Fake] = []

    def start(reply: Reply) -> tuple[Fake, ChatEndpoint]:
        srv = Fake(reply)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return srv, ChatEndpoint(f"http://127.0.0.1:{srv.server_address[1]}/v1", "m", retries=0)

    yield start
    for srv in servers:
        srv.shutdown()
        srv.server_close()


TEXTS = {"pA": "quarterly revenue table 2021 revenue grew", "pB": "employee headcount chart by region"}
# the large model's turns per question, by how many assistant turns the history already holds
SCRIPT = {
    "revenue grow": [
        "<think>find revenue</think><search>quarterly revenue 2021</search><info>made up</info>",
        "<think>zoom on the growth row</think><bbox>[0, 0, 5, 5]",  # stop sequence removed the close tag
        "<think>it says 10%</think><answer>10%</answer>",
    ],
    "headcount": [
        "<think>x</think><search>headcount</search>",
        "<think>x</think><answer>about twelve</answer>",
    ],
    "guess": ["<think>no need to look</think><answer>42</answer>"],
}


def _corpus(tmp_path: Path) -> dict[str, Page]:
    pages = {}
    for pid, text in TEXTS.items():
        path = tmp_path / f"{pid}.png"
        Image.new("RGB", (1000, 2000), "white").save(path)
        words = tuple(Word(w, Box(10.0 * j, 10.0, 10.0 * j + 8, 20.0)) for j, w in enumerate(text.split()))
        pages[pid] = Page(pid, str(path), 1000, 2000, words=words)
    return pages


def _text(body: dict[str, Any]) -> str:
    return " ".join(p.get("text", "") for m in body["messages"] for p in m["content"])


def _lm(body: dict[str, Any]) -> str:
    turn = sum(m["role"] == "assistant" for m in body["messages"])
    return next(turns[turn] for key, turns in SCRIPT.items() if key in _text(body))


SAMPLES = [
    Sample("q1", "How did revenue grow in 2021?", ("10%",), gold_pages=("pA",)),
    Sample("q2", "What is the headcount?", ("500",), gold_pages=("pB",)),
    Sample("q3", "Just guess the number", ("42",)),
]


def test_two_experts_compose_a_kept_trajectory_and_sft_reads_it(serve: Any, tmp_path: Path) -> None:
    pages = _corpus(tmp_path)
    lm_srv, lm = serve(_lm)
    ex_srv, expert = serve(
        lambda body: "The region is [10, 20, 60, 80]." if "growth row" in _text(body) else "?"
    )
    out = tmp_path / "me.jsonl"
    make_env = lambda s: SearchEnv(bm25_searcher(pages.values()), pages)  # noqa: E731
    steps: list[int] = []
    report = multiexpert(
        SAMPLES, make_env, lm, expert, out, MultiExpertConfig(concurrency=2), progress=steps.append
    )
    assert steps == [1, 1, 1]  # one per question as it finishes
    assert (report.questions, report.episodes, report.accepted, report.failed) == (3, 3, 1, 0)
    assert report.buckets == {"3 steps: search+bbox": 1}
    rows = {r["id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert rows["q2"]["reason"] == "wrong answer (ANLS 0.00)" and rows["q3"]["reason"] == "never searched"
    kept = rows["q1"]
    assert kept["accepted"] and kept["reason"] == ""
    roles = [m["role"] for m in kept["conversation"]]
    assert roles == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    turns = [m["content"][0]["text"] for m in kept["conversation"] if m["role"] == "assistant"]
    assert turns[0] == "<think>find revenue</think><search>quarterly revenue 2021</search>"  # cut after it
    assert turns[1] == "<think>zoom on the growth row</think><bbox>[10, 20, 60, 80]</bbox>"  # expert's box
    meta = kept["meta"]["turns"]
    assert meta[1]["lm_box"] == "[0, 0, 5, 5]" and meta[1]["expert_box"] == "[10, 20, 60, 80]"
    # pA is shown at 448 x 896 (1000 x 2000 under 512 * 28^2 pixels): the crop scales by 1000/448, 2000/896
    assert meta[1]["info"]["crop"] == [22, 44, 133, 178]
    assert kept["meta"]["retrieved"] == ["pA"]
    # Eq. 5: the expert saw the history (the page shown) and the large model's thought
    (ask,) = ex_srv.requests
    assert sum(p["type"] == "image_url" for m in ask["messages"] for p in m["content"]) == 1
    assert "zoom on the growth row" in _text(ask) and "448x896" in _text(ask)
    data = read_sft_data(out)
    assert (len(data.conversations), data.unused) == (1, 2)
    images = [p for m in data.conversations[0] for p in m.content if isinstance(p, ImagePart)]
    # the 111 x 134 crop is zoomed up to VRAG's 256 * 28^2 minimum pixels (Eq. 6's re-encoding)
    crop_size = process_image_size(111, 134, VRAG_MAX_PIXELS, VRAG_MIN_PIXELS)
    assert [Image.open(str(i.image)).size for i in images] == [(448, 896), crop_size]
    assert crop_size[0] > 111 * 3
    before = len(lm_srv.requests)
    steps.clear()
    again = multiexpert(SAMPLES, make_env, lm, expert, out, progress=steps.append)
    assert (again.skipped, again.questions, len(lm_srv.requests)) == (3, 0, before)
    assert steps == [3]  # all three were in out: counted at once


def test_several_samples_per_question_and_a_wrong_environment(serve: Any, tmp_path: Path) -> None:
    pages = _corpus(tmp_path)
    _, lm = serve(_lm)
    out = tmp_path / "me.jsonl"
    make_env = lambda s: SearchEnv(bm25_searcher(pages.values()), pages)  # noqa: E731
    report = multiexpert(SAMPLES[:1], make_env, lm, None, out, MultiExpertConfig(samples_per_question=2))
    assert (report.episodes, report.accepted) == (2, 2)  # no expert: the large model's box is kept
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["attempt"] for r in rows] == [0, 1]
    assert "<bbox>[0, 0, 5, 5]</bbox>" in rows[0]["conversation"][4]["content"][0]["text"]
    with pytest.raises(InvalidInputError, match="search environment"):
        multiexpert(SAMPLES[1:2], lambda s: SingleTurnEnv(Direct()), lm, None, tmp_path / "x.jsonl")
    with pytest.raises(InvalidInputError, match="min_steps"):
        MultiExpertConfig(min_steps=3, max_steps=2)
