"""``evidra serve --endpoint URL --model-name NAME``: the app answers with an OpenAI-compatible VLM
server (the scripted one of tests/scripted_vlm.py): ``/api/ask`` and ``/v1/chat/completions``
carry the evidence of a structured answer; an answer that does not parse is said to be unreadable,
its raw text kept; a server that keeps failing is one error line."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_server_helpers import lines
from test_browser import browser  # noqa: F401  (the headless Chromium fixture)

import evidra.openai.client as openai_client
from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace
from evidra.cli.main import build_parser, main
from evidra.cli.serve import open_workspace
from evidra.data.synth.documents import generate_documents
from scripted_vlm import Reply, ScriptedVLM, scripted_vlm

QUESTION = "What is Polaris?"
GOOD = json.dumps(
    {"answer": "Polaris", "steps": [{"text": "it is named", "page": 1, "box": [100, 100, 400, 200]}]}
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("serve-endpoint")
    corpus = generate_documents(root / "gen", n_docs=1, seed=5, dpi=50)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "50"]) == 0
    build = ["-q", "index", "build", "--store", str(root / "store"), "--out", str(root / "bm25")]
    assert main([*build, "--encoder", "bm25"]) == 0
    return root / "store"


@pytest.fixture
def app(store: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, ScriptedVLM]]:
    """``evidra serve --store S --endpoint URL --model-name NAME`` (options parsed as the CLI does)."""
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    with scripted_vlm(Reply(GOOD)) as server:
        argv = [
            "serve",
            "--store",
            str(store),
            "--endpoint",
            server.url,
            "--model-name",
            "Qwen/Qwen3-VL-8B-Instruct",
        ]
        workspace: Workspace = open_workspace(build_parser().parse_args(argv))
        try:
            with running(workspace, ServeOptions(access_log=False)) as url:
                yield url, server
        finally:
            workspace.close()


def _ask(url: str) -> dict[str, Any]:
    response = httpx.post(f"{url}/api/ask", json={"question": QUESTION, "k": 2}, timeout=60)
    assert response.status_code == 200, response.text
    return lines(response)[-1]


def _chat(url: str, **extra: Any) -> httpx.Response:
    body = {"model": "evidra", "messages": [{"role": "user", "content": QUESTION}], **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)


def test_api_ask_shows_a_parsed_answer_with_its_evidence(app: tuple[str, ScriptedVLM]) -> None:
    url, server = app
    event = _ask(url)
    assert event["type"] == "answer" and event["parsed"] and event["answer"] == "Polaris"
    (evidence,) = event["evidence"]
    assert (
        evidence["label"].startswith("doc_000.pdf p. ")
        and evidence["page_id"] == event["pages"][0]["page_id"]
    )
    width, height = event["pages"][0]["width"], event["pages"][0]["height"]
    expected = [100 * width / 1000, 100 * height / 1000, 400 * width / 1000, 200 * height / 1000]
    assert evidence["box"] == pytest.approx(expected, abs=0.1)
    assert server.requests[0]["body"]["response_format"]["type"] == "json_schema"


def test_chat_completions_whole_and_streamed_carry_the_evidence(app: tuple[str, ScriptedVLM]) -> None:
    url, _ = app
    whole = _chat(url).json()
    assert whole["parsed"] and len(whole["evidence"]) == 1 and whole["evidence"][0]["box"] is not None
    content = whole["choices"][0]["message"]["content"]
    assert "Answer: Polaris" in content and f"Sources: {whole['evidence'][0]['label']} [" in content
    streamed = _chat(url, stream=True).text
    chunks = [json.loads(c.removeprefix("data: ")) for c in streamed.split("\n\n") if c.startswith("data: {")]
    assert chunks[-1]["evidence"] == whole["evidence"] and chunks[-1]["parsed"]


def test_an_unreadable_answer_is_said_and_its_raw_text_kept(app: tuple[str, ScriptedVLM]) -> None:
    url, server = app
    server.replies[:] = [Reply('{"answer": "Pol')]
    event = _ask(url)
    assert not event["parsed"] and event["answer"] is None and event["output"] == '{"answer": "Pol'
    assert event["errors"][0].startswith("the answer is not JSON")
    content = _chat(url).json()["choices"][0]["message"]["content"]
    assert (
        content.startswith('{"answer": "Pol') and "Answer: (the model's answer could not be read)" in content
    )


def test_a_server_that_keeps_failing_is_one_error_line(app: tuple[str, ScriptedVLM]) -> None:
    url, server = app
    server.replies[:] = [Reply(status=500, error="overloaded")]
    event = _ask(url)
    assert event["type"] == "error" and "overloaded" in event["error"] and "\n" not in event["error"]
    assert len(server.requests) == 3  # the client's attempts, then the error


@pytest.mark.slow
def test_the_page_headlines_a_parsed_answer_and_folds_an_unreadable_one(
    app: tuple[str, ScriptedVLM],
    browser: Any,  # noqa: F811  (the fixture imported above)
    tmp_path: Path,
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    url, server = app
    shots = Path(os.environ.get("EVIDRA_TEST_ARTIFACTS") or tmp_path / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    browser.get(url)

    def ask() -> Any:
        box = browser.find_element(By.ID, "question")
        box.clear()
        box.send_keys(QUESTION)
        browser.find_element(By.ID, "ask-button").click()
        WebDriverWait(browser, 60).until(lambda d: d.find_element(By.ID, "final").is_displayed())
        return browser.find_element(By.ID, "answer-text")

    headline = ask()
    assert headline.text == "Polaris" and "unreadable" not in (headline.get_attribute("class") or "")
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#steps li.step"))
    assert "doc_000.pdf p. " in browser.find_element(By.ID, "steps").text
    browser.save_screenshot(str(shots / "endpoint-parsed.png"))

    server.replies[:] = [Reply('{"answer": "Pol')]
    headline = ask()
    WebDriverWait(browser, 30).until(
        lambda d: "could not be read" in d.find_element(By.ID, "answer-text").text
    )
    assert "unreadable" in (headline.get_attribute("class") or "")
    folded = browser.find_element(By.ID, "raw-box")
    assert folded.get_attribute("open") is None  # the raw text is folded below the notice
    assert browser.execute_script("return document.getElementById('raw').textContent") == '{"answer": "Pol'
    browser.save_screenshot(str(shots / "endpoint-unreadable.png"))


def test_api_ask_passes_the_servers_streamed_tokens_through(app: tuple[str, ScriptedVLM]) -> None:
    url, server = app
    response = httpx.post(f"{url}/api/ask", json={"question": QUESTION, "k": 2}, timeout=60)
    events = lines(response)
    tokens = [e["text"] for e in events if e["type"] == "token"]
    assert server.requests[0]["body"]["stream"] is True
    assert tokens == [GOOD[i : i + 8] for i in range(0, len(GOOD), 8)]  # the server's pieces, as sent
    assert events[-1]["type"] == "answer" and events[-1]["output"] == GOOD and events[-1]["parsed"]


def test_an_error_in_the_middle_of_the_stream_ends_the_answer_in_one_line(
    app: tuple[str, ScriptedVLM],
) -> None:
    url, server = app
    server.replies[:] = [Reply(GOOD, stream_error="CUDA out of memory")]
    events = lines(httpx.post(f"{url}/api/ask", json={"question": QUESTION, "k": 2}, timeout=60))
    assert [e["type"] for e in events][-1] == "error" and any(e["type"] == "token" for e in events)
    error = events[-1]["error"]
    assert "the stream broke after its text began" in error and "CUDA out of memory" in error
    assert len(server.requests) == 1  # text was already shown: not asked again


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_serve_and_mcp_take_the_endpoint_flags_and_refuse_half_of_them(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = build_parser().parse_args(
        [command, "--store", str(tmp_path / "s"), "--endpoint", "http://127.0.0.1:9/v1"]
    )
    assert (args.endpoint, args.model_name, args.structured, args.box_format) == (
        "http://127.0.0.1:9/v1",
        None,
        None,
        None,
    )
    assert main([command, "--store", str(tmp_path / "s"), "--endpoint", "http://127.0.0.1:9/v1"]) != 0
    err = capsys.readouterr().err.strip()
    assert "needs --model-name" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "s").exists()  # refused before the store is created
