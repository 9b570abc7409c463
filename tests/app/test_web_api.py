"""``evidra serve``'s JSON API with the tiny model: uploads (a bad file is listed, the rest goes
on), indexing with progress, documents, search, page images, streamed answers, refusals."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from app_server_helpers import fill as _fill
from app_server_helpers import lines as _lines
from app_server_helpers import upload

from evidra.app.workspace import Workspace
from evidra.data.synth.documents import SynthCorpus


def test_upload_index_search_and_read_pages(serve: tuple[str, Workspace], corpus: SynthCorpus) -> None:
    url, _ = serve
    bad = upload(url, "scan.pdf", b"%PDF-1.4 cut")
    assert bad["state"] == "failed" and bad["added"] == 0
    assert bad["failed"][0]["file"] == "scan.pdf" and "not a readable PDF" in bad["failed"][0]["reason"]
    _fill(url, corpus)
    again = upload(url, "copy.pdf", (corpus.docs_dir / "doc_000.pdf").read_bytes())
    assert again["state"] == "done" and again["added"] == 0
    assert again["unchanged"] == len(corpus.documents[0].page_ids) and again["indexed"] == 0
    assert _lines(httpx.post(f"{url}/api/index"))[-1] == {"type": "done", "added": 0}
    listed = httpx.get(f"{url}/api/uploads").json()["uploads"]
    assert [(j["name"], j["state"]) for j in listed][:2] == [
        ("scan.pdf", "failed"),
        ("reports/doc_000.pdf", "done"),
    ]

    docs = httpx.get(f"{url}/api/documents").json()["documents"]
    assert [d["source"] for d in docs] == [
        "reports/doc_000.pdf",
        "reports/doc_001.pdf",
    ]  # copy.pdf: same pages
    question = next(q for q in corpus.questions if q.kind == "table" and q.gold_box is not None)
    found = httpx.get(f"{url}/api/search", params={"q": question.answers[0], "k": 3}).json()
    assert found["hits"] and found["hits"][0]["label"].endswith(f"p. {question.page_number}")
    assert found["hits"][0]["document"].endswith(question.source)
    assert found["hits"][0]["matches"]  # the boxes of the page's words that are words of the query
    image = httpx.get(f"{url}{found['hits'][0]['image']}")
    assert image.status_code == 200 and image.content.startswith(b"\x89PNG")
    assert (
        image.headers["content-type"] == "image/png" and image.headers["x-content-type-options"] == "nosniff"
    )

    home = httpx.get(url)
    assert home.status_code == 200 and "reports/doc_000.pdf" in home.text and "<script" in home.text
    viewer = httpx.get(f"{url}/documents/reports/doc_000.pdf", params={"page": 2})
    assert viewer.status_code == 200 and "page 2 of" in viewer.text
    assert httpx.get(f"{url}/documents/nope.pdf").status_code == 404
    assert httpx.get(f"{url}/pages/../../etc/passwd/image").status_code == 404
    assert httpx.get(f"{url}/pages/abc-p0001/image").json() == {"error": "no page 'abc-p0001' in the store"}


def test_an_answer_streams_pages_then_text_then_evidence(
    serve: tuple[str, Workspace], corpus: SynthCorpus
) -> None:
    url, _ = serve
    _fill(url, corpus)
    question = next(q for q in corpus.questions if q.gold_box is not None)
    with httpx.stream(
        "POST", f"{url}/api/ask", json={"question": question.question, "k": 2}, timeout=120
    ) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("application/x-ndjson")
        events = [json.loads(line) for line in r.iter_lines() if line]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "pages" and kinds[-1] == "answer" and set(kinds[1:-1]) == {"token"}
    assert len(kinds) > 3  # the tiny model's text came in several pieces
    assert "".join(e["text"] for e in events if e["type"] == "token") == events[-1]["output"]
    assert [p["page_id"] for p in events[0]["pages"]] == [p["page_id"] for p in events[-1]["pages"]]
    assert events[1]["ms"] <= events[-1]["ms"]


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "message"),
    [
        ("POST", "/api/ask", b"[1]", 400, "the body must be a JSON object"),
        ("POST", "/api/ask", b"{", 400, "the body is not JSON"),
        ("POST", "/api/ask", json.dumps({"question": "x" * 4001}).encode(), 413, "over 4000"),
        ("POST", "/api/ask", json.dumps({"question": "q", "k": 99}).encode(), 400, "k must be in 1..20"),
        ("POST", "/api/ask", b'{"a":' * 40 + b"1" + b"}" * 40, 400, "nested deeper"),
        ("GET", "/api/search?q=", b"", 400, "a question is needed"),
        ("POST", "/api/upload?name=..%2F..", b"x", 400, "names no file"),
        ("GET", "/nowhere", b"", 404, "no page '/nowhere'"),
        ("PUT", "/api/ask", b"", 405, "Method Not Allowed"),
    ],
)
def test_bad_requests_get_one_line_refusals(
    serve: tuple[str, Workspace], method: str, path: str, body: bytes, status: int, message: str
) -> None:
    url, _ = serve
    got = httpx.request(method, f"{url}{path}", content=body)
    assert got.status_code == status and message in got.json()["error"], got.text


def test_an_upload_over_the_cap_is_refused(tmp_path: Path) -> None:
    from evidra.app.http import ServeOptions
    from evidra.app.server import running

    workspace = Workspace(tmp_path / "store")
    workspace.start_sync()
    try:
        with running(workspace, ServeOptions(max_upload=1000, access_log=False)) as url:
            got = httpx.post(f"{url}/api/upload", params={"name": "a.pdf"}, content=b"x" * 2000)
            assert got.status_code == 413 and "exceeds the limit of 1000" in got.json()["error"]
            assert httpx.post(f"{url}/api/ask", json={"question": "q"}).status_code == 409  # no model
            assert httpx.get(f"{url}/api/search", params={"q": "q"}).json()["hits"] == []
    finally:
        workspace.close()
