"""``evidra serve`` retrieves as ``evidra ask`` does: its ``--where`` filter, two ``--index`` fused
(hybrid), the same "no relevant page" answer, and ``--max-uploads`` (options parsed as the CLI
parses them; the model is the scripted OpenAI-compatible server of tests/scripted_vlm.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_server_helpers import lines

import evidra.openai.client as openai_client
from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace
from evidra.cli.main import build_parser, main
from evidra.cli.serve import open_workspace
from evidra.data.synth.documents import SynthCorpus, generate_documents
from evidra.rag_view import NO_HITS
from scripted_vlm import Reply, scripted_vlm

ANSWER = json.dumps({"answer": "yes", "steps": [{"text": "it says so", "page": 1, "box": [20, 40, 200, 60]}]})


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, SynthCorpus]:
    """A store of two documents with two BM25 indexes over it."""
    root = tmp_path_factory.mktemp("serve-retrieval")
    corpus = generate_documents(root / "gen", n_docs=2, seed=5, dpi=50)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "50"]) == 0
    for name in ("bm25-a", "bm25-b"):
        build = ["-q", "index", "build", "--store", str(root / "store"), "--out", str(root / name)]
        assert main([*build, "--encoder", "bm25"]) == 0
    return root, corpus


def _served(argv: list[str]) -> Iterator[str]:
    with scripted_vlm(Reply(ANSWER)) as server:
        args = build_parser().parse_args(
            [*argv, "--endpoint", server.url, "--model-name", "Qwen/Qwen3-VL-8B"]
        )
        workspace: Workspace = open_workspace(args)
        try:
            with running(workspace, ServeOptions(access_log=False)) as url:
                yield url
        finally:
            workspace.close()


@pytest.fixture
def serve(
    built: tuple[Path, SynthCorpus], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[str]:
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    root, _ = built
    extra = [part.replace("ROOT", str(root)) for part in request.param]
    yield from _served(["serve", "--store", str(root / "store"), *extra])


def _query(corpus: SynthCorpus) -> str:
    """A question whose words are on pages of both documents."""
    return " ".join(q.question for q in corpus.questions[:6])


def _documents(hits: list[dict[str, Any]]) -> set[str]:
    return {h["document"] for h in hits}


@pytest.mark.parametrize("serve", [["--index", "ROOT/bm25-a"]], indirect=True)
def test_without_a_filter_both_documents_are_found(serve: str, built: tuple[Path, SynthCorpus]) -> None:
    hits = httpx.get(f"{serve}/api/search", params={"q": _query(built[1]), "k": 20}).json()["hits"]
    assert _documents(hits) == {"doc_000.pdf", "doc_001.pdf"}


@pytest.mark.parametrize("serve", [["--index", "ROOT/bm25-a", "--where", "file=doc_001.pdf"]], indirect=True)
def test_where_keeps_search_and_answers_to_the_pages_it_accepts(
    serve: str, built: tuple[Path, SynthCorpus]
) -> None:
    query = _query(built[1])
    hits = httpx.get(f"{serve}/api/search", params={"q": query, "k": 20}).json()["hits"]
    assert hits and _documents(hits) == {"doc_001.pdf"}
    answer = lines(httpx.post(f"{serve}/api/ask", json={"question": query, "k": 3}, timeout=60))[-1]
    assert answer["type"] == "answer" and {p["document"] for p in answer["pages"]} == {"doc_001.pdf"}


@pytest.mark.parametrize(
    "serve", [["--index", "ROOT/bm25-a", "--index", "ROOT/bm25-b", "--fusion", "rrf"]], indirect=True
)
def test_two_indexes_are_fused_and_uploads_say_they_are_not_indexed(
    serve: str, built: tuple[Path, SynthCorpus]
) -> None:
    query = _query(built[1])
    hits = httpx.get(f"{serve}/api/search", params={"q": query, "k": 3}).json()["hits"]
    assert len(hits) == 3  # every page of the store
    # RRF of two copies of one index: 1/(60 + rank) from each, so 2/61, 2/62, 2/63 (rounded to 4 places)
    assert [h["score"] for h in hits] == pytest.approx([2 / 61, 2 / 62, 2 / 63], abs=1e-4)
    chat = {"messages": [{"role": "user", "content": query}]}
    reply = httpx.post(f"{serve}/v1/chat/completions", json=chat, timeout=60).json()
    content = reply["choices"][0]["message"]["content"]
    assert content.splitlines()[-1].startswith("Sources: doc_00") and " p. " in content.splitlines()[-1]
    added = httpx.post(f"{serve}/api/index", timeout=60)
    assert "does not add pages to" in lines(added)[-1]["error"]


@pytest.mark.parametrize("serve", [["--index", "ROOT/bm25-a"]], indirect=True)
def test_no_matching_page_is_said_as_ask_says_it(serve: str) -> None:
    events = lines(httpx.post(f"{serve}/api/ask", json={"question": "zzqxv wvutq"}, timeout=60))
    assert [e["type"] for e in events] == ["answer"]
    assert events[0]["no_hits"] is True and events[0]["notice"] == NO_HITS and events[0]["answer"] is None


def test_serve_takes_asks_retrieval_options_and_max_uploads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["serve", "--store", str(tmp_path / "s"), "--index", "a", "--index", "http://x", "--fusion"]
    args = build_parser().parse_args(
        [*argv, "minmax", "--where", "year=2024", "-k", "4", "--max-uploads", "5"]
    )
    assert (args.index, args.fusion, args.where, args.k, args.max_uploads) == (
        ["a", "http://x"],
        "minmax",
        ["year=2024"],
        4,
        5,
    )
    seen: dict[str, ServeOptions] = {}

    def served(workspace: Workspace, options: ServeOptions, *rest: Any, **kw: Any) -> None:
        seen["options"] = options

    monkeypatch.setattr("evidra.app.server.serve_forever", served)
    assert main(["-q", "serve", "--store", str(tmp_path / "s"), "--max-uploads", "7"]) == 0
    assert seen["options"].max_uploads == 7
    assert main(["serve", "--store", str(tmp_path / "s"), "--max-uploads", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--max-uploads must be 1 or more, got 0" in err[0]
    assert main(["serve", "--store", str(tmp_path / "s"), "--where", "nonsense"]) == 2
