"""A follow-up question in a conversation: retrieval and the model use the earlier turns, in
``/v1/chat/completions`` (whole and streamed) and ``/api/ask``; malformed conversations get 400."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_server_helpers import lines, upload_manual

from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace
from evidra.core.types import ImagePart, Message

FIRST = "What pressure does the Heron valve hold?"
REPLY = "<think>The valve page says it.</think>\n<answer>twelve bar</answer>"
FOLLOW_UP = "And what about its return?"


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[list[Message]]:
    """``generate`` replaced by one that records the chat it is given and streams ``REPLY``."""
    import evidra.models.generation as generation

    chats: list[list[Message]] = []

    def fake_generate(vlm: Any, batch: Any, params: Any, on_text: Any = None) -> list[generation.Generation]:
        chats.append(list(batch[0]))
        for start in range(0, len(REPLY), 10):
            if on_text is not None:
                on_text(REPLY[start : start + 10])
        return [generation.Generation((), (), (), REPLY, "eos")]

    monkeypatch.setattr(generation, "generate", fake_generate)
    return chats


def _chat(url: str, messages: list[dict[str, Any]], **extra: Any) -> httpx.Response:
    body = {"model": "evidra", "messages": messages, "k": 1, **extra}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def _conversation() -> list[dict[str, Any]]:
    return [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": "twelve bar\n\nSources: manual.pdf p. 2"},
        {"role": "user", "content": [{"type": "text", "text": FOLLOW_UP}]},
    ]


def _streamed_pages(response: httpx.Response) -> list[int]:
    events = [e.removeprefix("data: ") for e in response.text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == "[DONE]"
    return [p["page"] for p in json.loads(events[-2])["pages"]]


def _check_prompt(chat: list[Message]) -> None:
    """The earlier turns, as text, before this turn's prompt and its one page; no client system."""
    assert [m.role for m in chat] == ["user", "assistant", "user"]
    assert chat[0].plain_text == FIRST and chat[1].plain_text.startswith("twelve bar")
    assert not chat[0].images and not chat[1].images
    assert FOLLOW_UP in chat[2].plain_text and len(chat[2].images) == 1
    assert all("helpful assistant" not in m.plain_text for m in chat)


def test_a_follow_up_retrieves_and_reads_with_the_earlier_turns(
    serve: tuple[str, Workspace], recorded: list[list[Message]]
) -> None:
    url, _ = serve
    upload_manual(url)
    alone = _chat(url, [{"role": "user", "content": FOLLOW_UP}])
    assert alone.status_code == 200, alone.text
    assert [p["page"] for p in alone.json()["pages"]] == [3]  # the return policy: the wrong page
    assert [m.role for m in recorded[-1]] == ["user"]

    whole = _chat(url, _conversation())
    assert whole.status_code == 200, whole.text
    assert [p["page"] for p in whole.json()["pages"]] == [2]  # the Heron valve's page
    _check_prompt(recorded[-1])
    image = recorded[-1][2].images[0]
    assert isinstance(image, ImagePart) and image.page_id == whole.json()["pages"][0]["page_id"]

    streamed = _chat(url, _conversation(), stream=True)
    assert streamed.status_code == 200 and _streamed_pages(streamed) == [2]
    _check_prompt(recorded[-1])

    history = [{"role": "user", "content": FIRST}, {"role": "assistant", "content": "twelve bar"}]
    asked = lines(
        httpx.post(f"{url}/api/ask", json={"question": FOLLOW_UP, "k": 1, "history": history}, timeout=120)
    )
    assert [p["page"] for p in asked[0]["pages"]] == [2] and asked[-1]["type"] == "answer"
    assert [m.role for m in recorded[-1]] == ["user", "assistant", "user"]


def _text(n: int) -> str:
    return "word " * (n // 5)


BAD_CHATS = [
    ({"messages": [{"role": "user", "content": "q"}] * 65}, "65 messages, over the cap of 64"),
    ({"messages": [{"role": "user", "content": _text(4000)}] * 30}, "characters, over the cap of 100000"),
    (
        {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
        "message 1 holds a part of type 'image_url'",
    ),
    (
        {"messages": [{"role": "user", "content": "q"}, {"role": "tool", "content": "r"}]},
        "message 2 has role 'tool'",
    ),
    ({"messages": ["hi"]}, "message 1 is not an object"),
    (
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": None}]},
        "message 2 (assistant) has no text content",
    ),
    (
        {"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]},
        "end the messages with the user's question",
    ),
    (
        {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
        "message 1 holds a malformed part",
    ),
    ({"messages": [{"role": "user", "content": [None]}]}, "message 1 holds a malformed part"),
    ({"messages": [{"role": "user", "content": "\ud800"}]}, "lone surrogate"),
    ({"messages": [{"role": ["user"], "content": "q"}]}, "message 1 has role ['user']"),
    ({"messages": {"role": "user"}}, "messages must be a list"),
]
BAD_ASKS = [
    ({"question": "q", "history": "earlier"}, "history must be a list"),
    (
        {"question": "q", "history": [{"role": "user", "content": [{"type": "input_audio"}]}]},
        "of type 'input_audio'",
    ),
    ({"question": "q", "history": [{"role": "function", "content": "f"}]}, "message 1 has role 'function'"),
]


def test_malformed_conversations_get_a_one_line_400(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "store")  # no model: every refusal comes before the model is asked
    workspace.start_sync()
    try:
        with running(workspace, ServeOptions(access_log=False)) as url:
            for body, message in BAD_CHATS:
                got = httpx.post(f"{url}/v1/chat/completions", content=json.dumps(body))  # \ud800 escaped
                error = got.json()["error"]["message"]
                assert got.status_code == 400 and message in error and "\n" not in error, (message, got.text)
            for body, message in BAD_ASKS:
                got = httpx.post(f"{url}/api/ask", json=body)
                error = got.json()["error"]
                assert got.status_code == 400 and message in error and "\n" not in error, (message, got.text)
            fine = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]
            assert _chat(url, fine).status_code == 409  # well formed: refused only for the missing model
    finally:
        workspace.close()
