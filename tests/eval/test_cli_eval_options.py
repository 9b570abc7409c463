"""``evidra eval`` as the papers evaluate: a page budget per question (ranked by an index or the
benchmark's order), Lang2Act's curated toolbox in the prompt, LAT's Step Accuracy column.

The model is a fake OpenAI-compatible server on 127.0.0.1 that records what it was shown (the
system prompt, the size of every image) and answers with a fixed text."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from PIL import Image

from evidra.cli.main import main

pytest.importorskip("httpx")

SIZES = [(40, 50), (60, 30), (20, 20), (30, 30)]  # page i of the fixture: each size tells it apart


class _Recorder(BaseHTTPRequestHandler):
    reply = "<answer>x</answer>"
    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        sizes, system = [], ""
        for m in body["messages"]:
            parts = (
                m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            )
            for p in parts:
                if p["type"] == "image_url":
                    data = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                    sizes.append(Image.open(io.BytesIO(data)).size)
                elif m["role"] == "system":
                    system += p["text"]
        type(self).seen.append({"sizes": sizes, "system": system})
        out = {
            "choices": [{"message": {"content": type(self).reply}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 5},
        }
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server() -> Iterator[type[_Recorder]]:
    handler = type("Handler", (_Recorder,), {"seen": [], "reply": _Recorder.reply})
    srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    handler.url = f"http://127.0.0.1:{srv.server_address[1]}/v1"  # type: ignore[attr-defined]
    yield handler
    srv.shutdown()
    srv.server_close()


def _benchmark(root: Path) -> Path:
    """An EVisRAG top-k file: one question, four retrieved pages of distinct sizes."""
    folder = root / "EVisRAG-Test-X"
    (folder / "imgs").mkdir(parents=True)
    for i, size in enumerate(SIZES):
        Image.new("RGB", size, (255, 255, 255)).save(folder / "imgs" / f"p{i}.png")
    row = {
        "qid": "q1",
        "query": "Which page?",
        "image": [f"imgs/p{i}.png" for i in range(4)],
        "answer": ["x"],
        "is_sufficient": True,
    }
    (folder / "top3_test.jsonl").write_text(json.dumps(row) + "\n")
    return folder / "top3_test.jsonl"


def _eval(server: Any, data: Path, out: Path, *extra: str) -> int:
    return main(
        [
            "-q",
            "eval",
            "--benchmark",
            "evisrag_top3",
            "--data",
            str(data),
            "--option",
            "topk=4",
            "--endpoint",
            server.url,
            "--model-name",
            "fake",
            "--out",
            str(out),
            *extra,
        ]
    )


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


def test_page_budget_in_the_benchmarks_order(server: Any, tmp_path: Path) -> None:
    data = _benchmark(tmp_path)
    assert _eval(server, data, tmp_path / "all", "--paradigm", "direct") == 0
    assert _eval(server, data, tmp_path / "top2", "--paradigm", "direct", "--pages-per-question", "2") == 0
    assert [s["sizes"] for s in server.seen] == [SIZES, SIZES[:2]]
    assert [r["paradigm"] for r in _rows(tmp_path / "top2")] == ["direct[top2]"]  # its own cache rows


@pytest.mark.slow
def test_page_budget_ranked_by_an_index(server: Any, tmp_path: Path, tiny_dirs: dict[str, Path]) -> None:
    """With --index the pages are the index's top 2 for the question, in its order."""
    from evidra.retrieval.lifecycle.index_folder import open_searcher

    data, idx = _benchmark(tmp_path), tmp_path / "idx"
    build = [
        "-q",
        "index",
        "build",
        "--dataset",
        "evisrag_top3",
        "--data",
        str(data),
        "--option",
        "topk=4",
        "--out",
        str(idx),
        "--encoder",
        "colqwen2",
        "--model",
        str(tiny_dirs["colqwen2"]),
    ]
    assert main(build) == 0
    (hits,) = open_searcher(str(idx)).search(["Which page?"], k=2)
    expected = [SIZES[int(h.page_id[len("imgs/p")])] for h in hits]
    assert (
        _eval(
            server,
            data,
            tmp_path / "e",
            "--paradigm",
            "direct",
            "--pages-per-question",
            "2",
            "--index",
            str(idx),
        )
        == 0
    )
    assert server.seen[-1]["sizes"] == expected


def test_curated_toolbox_in_the_lang2act_prompt(server: Any, tmp_path: Path) -> None:
    box = tmp_path / "curated.json"
    box.write_text(json.dumps([{"name": "subtract_values", "args": "(a, b)", "description": "a minus b"}]))
    data = _benchmark(tmp_path)
    server.reply = (
        '<think>.</think><description><tool name="subtract_values" args="5, 3">2</tool>'
        "</description><answer>x</answer>"
    )
    argv = ["--paradigm", "toolchain", "--pages-per-question", "3"]
    assert _eval(server, data, tmp_path / "default", *argv) == 0
    assert _eval(server, data, tmp_path / "curated", *argv, "--toolbox", str(box)) == 0
    default, curated = server.seen
    assert "subtract_values" in curated["system"] and "subtract_values" not in default["system"]
    assert "locate_visual_element" in default["system"] and "locate_visual_element" not in curated["system"]
    assert "analyze all 3 images" in curated["system"] and curated["sizes"] == SIZES[:3]
    (row,) = _rows(tmp_path / "curated")
    assert row["paradigm"] == "toolchain[top3,toolbox=curated]"


def test_toolbox_for_a_paradigm_without_tools_is_refused(
    server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    box = tmp_path / "curated.json"
    box.write_text(json.dumps([{"name": "subtract_values", "args": "(a, b)", "description": "a minus b"}]))
    assert (
        _eval(server, _benchmark(tmp_path), tmp_path / "o", "--paradigm", "coe", "--toolbox", str(box)) == 2
    )
    assert "--toolbox: paradigm 'coe' lists no tools" in capsys.readouterr().err
    assert (
        _eval(server, _benchmark(tmp_path / "b"), tmp_path / "o", "--paradigm", "direct", "--index", "x") == 2
    )
    assert "--index is for --env search" in capsys.readouterr().err
    assert server.seen == []  # refused before any request


def test_step_accuracy_column_with_the_tiny_retriever(
    server: Any, tmp_path: Path, tiny_dirs: dict[str, Path]
) -> None:
    """SA of a CoE answer with two disjoint boxes on page 1: (1[min sim >= 0.3] + 1[IoU <= 0.5]) / 2,
    the similarity being the retriever's (the same tiny ColQwen2 loaded here)."""
    from evidra.methods.lat.rules import stepwise_attribution
    from evidra.methods.lat.similarity import ColQwen2Similarity

    box = '{{"bbox_2d": [{}], "Image_index": 1}}'
    server.reply = (
        f"<think>The title is at the top. Bounding box: {box.format('2, 2, 10, 10')} "
        f"The date is below it. Bounding box: {box.format('12, 12, 30, 30')}</think>\n"
        f"<answer>x\nBounding box: {box.format('12, 12, 30, 30')}</answer>"
    )
    data, out = _benchmark(tmp_path), tmp_path / "sa"
    argv = ["--paradigm", "coe", "--pages-per-question", "2", "--sa-retriever", str(tiny_dirs["colqwen2"])]
    assert _eval(server, data, out, *argv) == 0
    (row,) = _rows(out)
    similarity = ColQwen2Similarity.load(tiny_dirs["colqwen2"], device="cpu")
    pages = [Image.open(data.parent / "imgs" / f"p{i}.png") for i in range(2)]
    expected = stepwise_attribution(server.reply, pages, similarity)
    assert row["metrics"]["sa"] == pytest.approx(expected) and expected in (
        0.5,
        1.0,
    )  # disjoint boxes: >= 0.5
    tables = (out / "tables.md").read_text()
    assert "evisrag_top3 SA" in tables and "## lat" in tables
    assert _eval(server, data, out, *argv[:4]) == 0  # without the retriever: no SA column
    assert "sa" not in _rows(out)[0]["metrics"]
