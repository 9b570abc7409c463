"""Kept conversations of ``evidra serve``: every answer of ``/api/ask`` is kept with its page + box
citations, listed, reopened after a restart, continued, deleted and exported as one HTML or
Markdown file with its crops inside; a hostile stored record reaches no page as markup. The model
is the scripted OpenAI-compatible server of tests/scripted_vlm.py."""

from __future__ import annotations

import base64
import io
import json
import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_server_helpers import lines
from PIL import Image

import evidra.openai.client as openai_client
from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace
from evidra.cli.main import build_parser, main
from evidra.cli.serve import open_workspace
from evidra.corpus.store import DB_NAME
from evidra.data.synth.documents import SynthCorpus, generate_documents
from scripted_vlm import Reply, ScriptedVLM, scripted_vlm

HOSTILE = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
STEP_BOX = [60, 90, 160, 110]
ANSWER = json.dumps(
    {"answer": "Polaris", "steps": [{"text": f"it is named {HOSTILE}", "page": 1, "box": STEP_BOX}]}
)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthCorpus]:
    root = tmp_path_factory.mktemp("kept")
    corpus = generate_documents(root / "gen", n_docs=1, seed=5, dpi=50)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "50"]) == 0
    build = ["-q", "index", "build", "--store", str(root / "store"), "--out", str(root / "bm25")]
    assert main([*build, "--encoder", "bm25"]) == 0
    return root, corpus


@dataclass(frozen=True)
class Server:
    """``evidra serve`` over a store, restartable, with the scripted VLM behind it."""

    store: Path
    vlm: ScriptedVLM

    @contextmanager
    def running(self) -> Iterator[str]:
        argv = [
            "serve",
            "--store",
            str(self.store),
            "--endpoint",
            self.vlm.url,
            "--model-name",
            "Qwen/Qwen3-VL-8B",
        ]
        workspace: Workspace = open_workspace(build_parser().parse_args(argv))
        try:
            with running(workspace, ServeOptions(access_log=False)) as url:
                yield url
        finally:
            workspace.close()


@pytest.fixture
def server(
    built: tuple[Path, SynthCorpus], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Server]:
    import shutil

    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    store = tmp_path / "store"
    shutil.copytree(built[0] / "store", store)  # each test keeps its own conversations
    with scripted_vlm(Reply(ANSWER)) as vlm:
        yield Server(store, vlm)


def _question(built: tuple[Path, SynthCorpus]) -> str:
    return built[1].questions[0].question


def _ask(url: str, question: str, **body: Any) -> dict[str, Any]:
    events = lines(httpx.post(f"{url}/api/ask", json={"question": question, "k": 2, **body}, timeout=60))
    assert events[-1]["type"] == "answer", events[-1]
    return events[-1]


def test_answers_are_kept_reopened_after_a_restart_continued_and_deleted(
    server: Server, built: tuple[Path, SynthCorpus]
) -> None:
    question = _question(built)
    with server.running() as url:
        first = _ask(url, question)
        cid = first["conversation"]
        second = _ask(url, "And then?", conversation=cid)
        assert second["conversation"] == cid and second["turn"] != first["turn"]
    with server.running() as url:  # a restart: the same store, a new process state
        (listed,) = httpx.get(f"{url}/api/conversations").json()["conversations"]
        assert (listed["id"], listed["title"], listed["turns"]) == (cid, question, 2)
        kept = httpx.get(f"{url}/api/conversations/{cid}").json()
        assert [t["question"] for t in kept["turns"]] == [question, "And then?"]
        turn = kept["turns"][0]
        assert turn["answer"] == "Polaris" and turn["parsed"] and turn["turn"] == first["turn"]
        (step,) = turn["evidence"]
        assert step["box"] == first["evidence"][0]["box"] and step["label"] == first["evidence"][0]["label"]
        assert step["label"].startswith("doc_000.pdf p. ") and step["page_id"] in {
            p["page_id"] for p in turn["pages"]
        }
        crop = step["crop"]  # the box grown to whole lines: it holds the box
        assert crop[0] <= step["box"][0] and crop[2] >= step["box"][2] and crop[1] <= step["box"][1]
        assert httpx.delete(f"{url}/api/conversations/{cid}").json() == {"deleted": cid}
        assert httpx.get(f"{url}/api/conversations/{cid}").status_code == 404
        refused = httpx.post(f"{url}/api/ask", json={"question": question, "conversation": cid})
        assert refused.status_code == 404 and "no conversation" in refused.json()["error"]
        assert httpx.get(f"{url}/api/conversations/..%2Fx").status_code in (400, 404)


def test_an_answer_exports_as_html_and_markdown_with_its_crops(
    server: Server, built: tuple[Path, SynthCorpus]
) -> None:
    with server.running() as url:
        got = _ask(url, _question(built))
        base = f"{url}/api/conversations/{got['conversation']}/turns/{got['turn']}/export"
        html = httpx.get(base, params={"format": "html"})
        md = httpx.get(base, params={"format": "md"})
        assert httpx.get(base, params={"format": "pdf"}).status_code == 404
    assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
    assert "attachment" in html.headers["content-disposition"]
    page = html.text
    assert "<script" not in page and "onerror=" not in page.replace("onerror=&#34;", "")
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in page  # the model's markup, shown as text
    assert "default-src 'none'; img-src data:" in page
    (uri,) = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    crop = Image.open(io.BytesIO(base64.b64decode(uri)))
    assert crop.width >= STEP_BOX[2] - STEP_BOX[0] and crop.height >= STEP_BOX[3] - STEP_BOX[1]
    assert md.status_code == 200 and md.headers["content-type"].startswith("text/markdown")
    assert (
        "](data:image/png;base64," in md.text
        and "<script" not in md.text
        and "**Answer:** Polaris" in md.text
    )


def test_a_hostile_stored_record_is_data_not_markup(server: Server, built: tuple[Path, SynthCorpus]) -> None:
    with server.running() as url:
        got = _ask(url, _question(built))
    with sqlite3.connect(server.store / DB_NAME) as conn:  # another process rewrote the record
        (record,) = conn.execute("SELECT record FROM turns").fetchone()
        planted = {
            **json.loads(record),
            "question": HOSTILE,
            "answer": HOSTILE,
            "page_ids": ["../../etc/passwd"],
        }
        planted["cited"][0]["page_id"] = "<b>nope</b>"
        conn.execute("UPDATE turns SET record = ?", (json.dumps(planted),))
        conn.execute("UPDATE conversations SET title = ?", (HOSTILE * 10,))
    with server.running() as url:
        listed = httpx.get(f"{url}/api/conversations").json()["conversations"][0]
        assert len(listed["title"]) == 120
        turn = httpx.get(f"{url}/api/conversations/{got['conversation']}").json()["turns"][0]
        html = httpx.get(f"{url}/api/conversations/{got['conversation']}/turns/{got['turn']}/export").text
    assert turn["question"] == HOSTILE and turn["pages"] == []  # a page not in the store is left out
    assert turn["evidence"][0]["page_id"] is None and turn["evidence"][0]["box"] is None
    assert "<script" not in html and "&lt;script&gt;" in html


def test_chat_replies_end_with_their_sources_whole_and_streamed(
    server: Server, built: tuple[Path, SynthCorpus]
) -> None:
    chat = {"messages": [{"role": "user", "content": _question(built)}]}
    with server.running() as url:
        whole = httpx.post(f"{url}/v1/chat/completions", json=chat, timeout=60).json()
        streamed = httpx.post(f"{url}/v1/chat/completions", json={**chat, "stream": True}, timeout=60)
    content = whole["choices"][0]["message"]["content"]
    pieces = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    joined = "".join(p["choices"][0]["delta"].get("content", "") for p in pieces)
    for text in (content, joined):
        last = text.splitlines()[-1]
        assert re.fullmatch(r"Sources: doc_000\.pdf p\. \d+ \[[\d., ]+\]", last), last
