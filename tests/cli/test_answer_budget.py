"""The token budget of an answer follows its mode unless the user names one: 1024 for a structured
JSON answer (room for several cited steps), 256 in a paradigm's own format; ``ask``, ``serve`` and
``mcp`` take it from ``RAG``, which asks the server for that many (scripted server of
tests/scripted_vlm.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evidra.openai.client as openai_client
from evidra.cli.ask import _max_new_tokens
from evidra.cli.main import build_parser, main
from evidra.data.synth.documents import generate_documents
from evidra.models.generation import SamplingParams
from evidra.rag import RAG, default_max_new_tokens
from scripted_vlm import Reply, scripted_vlm

ENDPOINT = ["--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m"]


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("answer-budget")
    corpus = generate_documents(root / "gen", n_docs=1, seed=5, dpi=50, max_pages=1)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "50"]) == 0
    return root / "store"


@pytest.fixture(autouse=True)
def _no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (ENDPOINT, 1024),  # an endpoint answers structured by default
        ([*ENDPOINT, "--no-structured"], 256),
        ([*ENDPOINT, "--max-new-tokens", "300"], 300),  # a number the user names wins
        (["--model", "runs/lat-7b/checkpoint-200"], 256),  # a trained checkpoint writes its paradigm
        (["--model", "runs/lat-7b/checkpoint-200", "--structured"], 1024),
        (["--model", "Qwen/Qwen2.5-VL-7B-Instruct"], 1024),  # a released instruct model: structured
    ],
)
def test_ask_s_budget_follows_the_answer_s_mode(flags: list[str], expected: int) -> None:
    args = build_parser().parse_args(["ask", "--store", "s", *flags, "question?"])
    assert _max_new_tokens(args) == expected


def test_serve_and_mcp_leave_the_budget_to_the_answer_s_mode() -> None:
    for command in ("serve", "mcp"):
        args = build_parser().parse_args([command, "--store", "s", *ENDPOINT])
        assert args.max_new_tokens is None
        named = build_parser().parse_args([command, "--store", "s", *ENDPOINT, "--max-new-tokens", "64"])
        assert named.max_new_tokens == 64


@pytest.mark.parametrize(("structured", "expected"), [(None, 1024), (True, 1024), (False, 256)])
def test_the_server_is_asked_for_the_mode_s_budget(
    store: Path, structured: bool | None, expected: int
) -> None:
    reply = json.dumps({"answer": "x", "steps": []})
    with (
        scripted_vlm(Reply(reply)) as server,
        RAG.load(store, endpoint=server.url, model_name="m", structured=structured) as rag,
    ):
        rag.ask("What is on the page?")
        assert rag.params.max_new_tokens == expected == default_max_new_tokens(rag.structured)
    assert server.requests[0]["body"]["max_tokens"] == expected


def test_a_budget_the_caller_names_is_kept(store: Path) -> None:
    reply = json.dumps({"answer": "x", "steps": []})
    params = SamplingParams(max_new_tokens=77, temperature=0.0)
    with (
        scripted_vlm(Reply(reply)) as server,
        RAG.load(store, endpoint=server.url, model_name="m", params=params) as rag,
    ):
        rag.ask("What is on the page?")
    assert server.requests[0]["body"]["max_tokens"] == 77
