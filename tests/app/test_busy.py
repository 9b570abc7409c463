"""Past ``MAX_WAITING_ASKS`` questions, ``/api/ask`` and ``/v1/chat/completions`` (streamed or not)
answer HTTP 503 with ``Retry-After`` before any stream starts; a place is given back when its
reply ends, also when the reader leaves half way."""

from __future__ import annotations

import time

import httpx
from app_server_helpers import upload_manual

from evidra.app.workspace import MAX_WAITING_ASKS, Workspace

CHAT = {"messages": [{"role": "user", "content": "What does the Falcon pump move?"}]}


def _wait_for_no_question(workspace: Workspace) -> None:
    deadline = time.monotonic() + 60
    while workspace.waiting_asks:
        assert time.monotonic() < deadline, workspace.waiting_asks
        time.sleep(0.05)


def test_past_the_waiting_questions_every_ask_route_answers_503(serve: tuple[str, Workspace]) -> None:
    url, workspace = serve
    upload_manual(url)
    held = [workspace.admit() for _ in range(MAX_WAITING_ASKS)]
    ask = httpx.post(f"{url}/api/ask", json={"question": "What does the Falcon pump move?"})
    assert ask.status_code == 503 and ask.headers["retry-after"] == "2"
    assert ask.json() == {"error": f"{MAX_WAITING_ASKS} questions are being answered; ask again in a moment"}
    for stream in (True, False):
        chat = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "stream": stream})
        assert chat.status_code == 503 and chat.headers["retry-after"] == "2", stream
        assert chat.headers["content-type"] == "application/json", stream
        assert chat.json()["error"]["code"] == 503 and chat.json()["error"]["type"] == "server_error"
    for ticket in held:
        ticket.drop()
    assert workspace.waiting_asks == 0
    streamed = httpx.post(f"{url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=120)
    assert streamed.status_code == 200 and streamed.text.endswith("data: [DONE]\n\n")
    answered = httpx.post(f"{url}/api/ask", json={"question": "What does the Falcon pump move?"}, timeout=120)
    assert answered.status_code == 200 and '"type": "answer"' in answered.text
    _wait_for_no_question(workspace)


def test_a_reader_that_leaves_gives_its_place_back(serve: tuple[str, Workspace]) -> None:
    url, workspace = serve
    upload_manual(url)
    for _ in range(MAX_WAITING_ASKS + 2):  # more than the places: each left one is given back
        body = {"question": "What does the Falcon pump move?"}
        with httpx.stream("POST", f"{url}/api/ask", json=body, timeout=120) as reply:
            assert reply.status_code == 200
            next(reply.iter_lines())  # the pages found; then the reader goes
        _wait_for_no_question(workspace)
