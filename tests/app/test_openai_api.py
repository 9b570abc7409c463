"""``/v1/chat/completions``: OpenAI's reply shapes, streamed and whole, with the evidence attached."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import httpx
from app_server_helpers import fill as _fill
from app_server_helpers import page_sources

from evidra.app.workspace import Workspace
from evidra.data.synth.documents import SynthCorpus
from evidra.rag_view import NO_HITS


def _ask(url: str, question: str, **extra: Any) -> httpx.Response:
    user = {"role": "user", "content": [{"type": "text", "text": question}]}
    body = {"model": "evidra", "messages": [{"role": "system", "content": "Be brief."}, user]}
    return httpx.post(f"{url}/v1/chat/completions", json={**body, **extra}, timeout=120)


def _chunks(response: httpx.Response) -> list[Any]:
    events = [
        line.removeprefix("data: ") for line in response.text.split("\n\n") if line.startswith("data: ")
    ]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_a_reply_carries_the_answer_its_sources_and_the_evidence(
    serve: tuple[str, Workspace], corpus: SynthCorpus, oracle: dict[str, Any]
) -> None:
    url, _ = serve
    _fill(url, corpus)
    oracle["sources"] = {pid: (f"reports/{s}", n) for pid, (s, n) in page_sources(url).items()}
    question = oracle["question"] = replace(oracle["question"], source=f"reports/{oracle['question'].source}")
    assert httpx.get(f"{url}/v1/models").json()["data"][0]["id"] == "evidra"

    whole = _ask(url, question.question)
    assert whole.status_code == 200, whole.text
    reply = whole.json()
    assert reply["object"] == "chat.completion" and reply["choices"][0]["finish_reason"] == "stop"
    content = reply["choices"][0]["message"]["content"]
    assert (
        content.startswith(oracle["texts"][-1]) and f"\n\nAnswer: {question.answers[0]}\nSources: " in content
    )
    label = f"{question.source.rsplit('/', 1)[-1]} p. {question.page_number}"
    assert f"Sources: {label} [" in content
    first = reply["evidence"][0]
    assert first["document"] == question.source and first["page"] == question.page_number
    assert first["box"] == [round(c) for c in question.evidence_box.as_tuple()]
    assert reply["evidence"][-1]["step"] == 0  # the answer's own box comes last
    assert {p["page_id"] for p in reply["pages"]} >= {first["page_id"]}

    streamed = _ask(url, question.question, stream=True)
    assert streamed.headers["content-type"].startswith("text/event-stream")
    chunks = _chunks(streamed)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all(c["object"] == "chat.completion.chunk" and c["id"] == chunks[0]["id"] for c in chunks)
    assert len(chunks) > 5  # the text arrived in pieces
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == content
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["evidence"] == reply["evidence"]


def test_the_tiny_model_streams_what_it_answers_whole(
    serve: tuple[str, Workspace], corpus: SynthCorpus
) -> None:
    url, _ = serve
    _fill(url, corpus)
    question = corpus.questions[0].question
    content = _ask(url, question).json()["choices"][0]["message"]["content"]
    chunks = _chunks(_ask(url, question, stream=True))
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == content


def test_refusals_are_openai_shaped(serve: tuple[str, Workspace]) -> None:
    url, _ = serve
    for body in ({"messages": []}, {"messages": [{"role": "system", "content": "x"}]}, {"messages": "hi"}):
        got = httpx.post(f"{url}/v1/chat/completions", json=body)
        assert got.status_code == 400 and got.json()["error"]["type"] == "invalid_request_error", got.text
    got = _ask(url, "anything at all")  # an empty store: nothing to retrieve, said as `ask` says it
    assert got.status_code == 200, got.text
    assert got.json()["choices"][0]["message"]["content"].endswith(f"Answer: ({NO_HITS})")
