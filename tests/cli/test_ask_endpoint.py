"""``evidra ask --endpoint URL --model-name NAME``: any OpenAI-compatible VLM answers, each step
printed with its ``file p. N`` and box, against the scripted server of tests/scripted_vlm.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import evidra.openai.client as openai_client
from evidra.cli.main import main
from evidra.core.types import Page
from evidra.corpus import PageStore
from evidra.data.synth.documents import generate_documents
from scripted_vlm import Reply, scripted_vlm

QUESTION = "Which star is named?"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two pages of a generated PDF with their words, and the BM25 index the store registers."""
    root = tmp_path_factory.mktemp("ask-endpoint")
    corpus = generate_documents(root / "gen", n_docs=1, seed=5, dpi=50)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "50"]) == 0
    build = ["-q", "index", "build", "--store", str(root / "store"), "--out", str(root / "bm25")]
    assert main([*build, "--encoder", "bm25"]) == 0
    return root / "store"


@pytest.fixture(autouse=True)
def _no_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)


def pages(store: Path) -> list[Page]:
    with PageStore.open(store) as opened:
        return opened.pages()


def norm1000(page: Page, index: int) -> list[float]:
    x1, y1, x2, y2 = page.words[index].box.as_tuple()
    return [x1 * 1000 / page.width, y1 * 1000 / page.height, x2 * 1000 / page.width, y2 * 1000 / page.height]


def test_ask_prints_the_answer_and_each_step_with_file_page_and_box(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = pages(store)[1]
    steps = [{"text": "the star's name", "page": 1, "box": norm1000(page, 4)}]
    reply = Reply(json.dumps({"answer": "Polaris", "steps": steps}))
    with scripted_vlm(reply) as server:
        argv = [
            "ask",
            "--store",
            str(store),
            "--endpoint",
            server.url,
            "--model-name",
            "Qwen/Qwen3-VL-8B-Instruct",
        ]
        assert main([*argv, "--page", page.id, QUESTION]) == 0
    out = capsys.readouterr().out
    word = page.words[4].box
    box = ", ".join(f"{c:g}" for c in (word.x1, word.y1, word.x2, word.y2))
    assert "answer: Polaris" in out
    assert f"step 1: {page.file_name} p. {page.page_number}, box ({box}): the star's name" in out


def test_ask_retrieves_from_the_registered_index_and_prints_json(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [{"text": "it is on image 1", "page": 1, "box": [100, 100, 400, 200]}]
    with scripted_vlm(Reply(json.dumps({"answer": "Polaris", "steps": steps}))) as server:
        argv = ["ask", "--store", str(store), "--endpoint", server.url, "--model-name", "m", "-k", "2"]
        assert main([*argv, "--json", "--box-format", "norm1000", "What is Polaris?"]) == 0
    result = json.loads(capsys.readouterr().out)
    (step,) = result["steps"]
    retrieved = [r["page_id"] for r in result["retrieved"]]
    assert result["answer"] == "Polaris" and retrieved and result["pages"] == retrieved
    assert (
        step["page"] == retrieved[0]
        and step["box"] is not None
        and step["cite"].startswith("doc_000.pdf p. ")
    )


def test_an_unreadable_answer_is_said_and_its_text_shown(
    store: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = pages(store)[0]
    with scripted_vlm(Reply('{"answer": "Pola')) as server:
        argv = [
            "ask",
            "--store",
            str(store),
            "--endpoint",
            server.url,
            "--model-name",
            "m",
            "--page",
            page.id,
        ]
        assert main([*argv, QUESTION]) == 0
    out = capsys.readouterr().out
    assert "answer: (the model's answer could not be read" in out and 'output: {"answer": "Pola' in out
    assert "format: the answer is not JSON" in out


def test_the_key_goes_from_the_named_variable_to_the_endpoint_and_is_never_printed(
    store: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key = "sk-ask-0123456789"
    monkeypatch.setenv("VLM_KEY", key)
    page = pages(store)[0]
    reply = Reply(json.dumps({"answer": "Polaris", "steps": []}))
    with scripted_vlm(reply) as server:
        argv = [
            "ask",
            "--store",
            str(store),
            "--endpoint",
            server.url,
            "--model-name",
            "m",
            "--page",
            page.id,
        ]
        assert main([*argv, "--api-key-env", "VLM_KEY", "--json", QUESTION]) == 0
    assert [r["authorization"] for r in server.requests] == [f"Bearer {key}"]
    assert key not in capsys.readouterr().out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--endpoint", "http://127.0.0.1:9/v1"], "needs --model-name"),
        (["--model-name", "m"], "pass --endpoint too"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m", "--model", "tiny:qwen2_5_vl"],
            "not both",
        ),
        ([], "pass --model PATH"),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m", "--box-format", "qwen25vl"],
            "qwen2.5-vl",
        ),
        (
            ["--endpoint", "http://127.0.0.1:9/v1", "--model-name", "m", "--api-key-env", "UNSET_KEY_VAR"],
            "UNSET_KEY_VAR",
        ),
    ],
)
def test_model_options_are_refused_in_one_line_before_the_store_opens(
    tmp_path: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no-store"
    assert main(["ask", "--store", str(missing), *extra, QUESTION]) != 0
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not missing.exists()
