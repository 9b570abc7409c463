"""The OpenAI chat-completions API over a workspace, so any OpenAI-compatible chat front end can ask.

``POST /v1/chat/completions`` answers the last user message from the store's top ``k`` pages
(``k`` in the body, else the server's), in the conversation its earlier user and assistant
messages hold: retrieval searches for the question with the earlier user turns, and the model
reads the earlier turns before it (``evidra.app.messages``, ``evidra.core.conversation``).
The reply's content is the model's text followed by ``Answer: ...`` and ``Sources: <document>
p. <page> [box]``; the reply also carries ``evidence`` (each cited step: document, page, box in
page pixels, page id) and ``pages`` (what the model was shown), fields OpenAI clients ignore and
evidra's own read. With ``"stream": true`` the reply is server-sent events of
``chat.completion.chunk`` objects: the role, each piece of text as the model writes it, then a
last chunk with the answer and sources, ``finish_reason`` and the ``evidence``; then ``[DONE]``.
Concatenating the streamed contents gives the content of the reply without streaming.
Refusals are OpenAI-shaped: ``{"error": {"message", "type", "code"}}``; a server whose model has
``MAX_WAITING_ASKS`` questions already answers 503 (with ``Retry-After``) before any stream starts.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evidra.app.citations import evidence, page_json, sources_line
from evidra.app.errors import RETRY_AFTER_S, Busy
from evidra.app.http import HeldStream, ServeOptions, k_of, read_json
from evidra.app.messages import conversation
from evidra.app.streams import Done, Failed, Piece, answer_events
from evidra.core.errors import EvidraError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.http.server_limits import HttpError

if TYPE_CHECKING:
    from evidra.app.workspace import AskTicket, Workspace
    from evidra.core.types import Message
    from evidra.rag import Answer

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}


@dataclass(frozen=True)
class Turn:
    """One request: the question, the earlier turns of its conversation, and the pages to read."""

    question: str
    history: tuple[Message, ...]
    k: int


def tail(answer: Answer) -> str:
    """What follows the model's text in the reply: the answer and its sources."""
    from evidra.rag import UNREADABLE
    from evidra.rag_view import NO_HITS

    said = answer.text if answer.parsed else f"({NO_HITS if answer.no_hits else UNREADABLE})"
    lines = [f"Answer: {said}"]
    if sources := sources_line(answer):
        lines.append(sources)
    return "\n\n" + "\n".join(lines)


def _evidence_fields(answer: Answer) -> JSONObject:
    return {
        "evidence": [e.as_json() for e in evidence(answer)],
        "pages": [page_json(p) for p in answer.pages],
        "parsed": answer.parsed,
    }


def _openai_error(status: int, message: str) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    headers = {"Retry-After": str(RETRY_AFTER_S)} if status == 503 else None
    return JSONResponse(
        {"error": {"message": message, "type": kind, "code": status}}, status_code=status, headers=headers
    )


def chat_routes(workspace: Workspace, options: ServeOptions) -> list[Route]:
    """``GET /v1/models`` and ``POST /v1/chat/completions``."""

    async def models(request: Request) -> Response:
        model = {"id": options.model_name, "object": "model", "created": 0, "owned_by": "evidra"}
        return JSONResponse({"object": "list", "data": [model]})

    async def completions(request: Request) -> Response:
        try:
            body = await read_json(request, options)
            question, history = conversation(body.get("messages"), options)
            k = k_of(body.get("k"), options.k, options)
            if not workspace.can_answer:
                raise HttpError(
                    409, "this server has no model; start it with --model or --endpoint to answer"
                )
        except HttpError as exc:
            return _openai_error(exc.status, str(exc))
        head: JSONObject = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "created": int(time.time()),
            "model": options.model_name,
        }
        turn = Turn(question, history, k)
        if body.get("stream") is not True:
            return await _whole(workspace, turn, head)
        try:
            ticket = workspace.admit()  # a full server answers 503 before the stream starts
        except Busy as exc:
            return _openai_error(503, str(exc))
        return HeldStream(
            ticket,
            _chunks(workspace, turn, head, ticket),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store"},
        )

    return [
        Route("/v1/models", models, methods=["GET"]),
        Route("/v1/chat/completions", completions, methods=["POST"]),
    ]


async def _whole(workspace: Workspace, turn: Turn, head: JSONObject) -> Response:
    try:
        answer = await workspace.ask(turn.question, turn.k, history=turn.history)
    except Busy as exc:
        return _openai_error(503, str(exc))
    except EvidraError as exc:
        return _openai_error(400, str(exc))
    message: JSONObject = {"role": "assistant", "content": answer.output + tail(answer)}
    choice: JSONObject = {
        "index": 0,
        "message": message,
        "finish_reason": FINISH.get(answer.finish_reason, "stop"),
    }
    return JSONResponse(
        {**head, "object": "chat.completion", "choices": [choice], **_evidence_fields(answer)}
    )


def _sse(record: JSONObject) -> bytes:
    return f"data: {json.dumps(record, ensure_ascii=False)}\n\n".encode()


async def _chunks(
    workspace: Workspace, turn: Turn, head: JSONObject, ticket: AskTicket
) -> AsyncIterator[bytes]:
    def chunk(delta: JSONObject, finish: str | None = None, **extra: JSON) -> bytes:
        choice: JSONObject = {"index": 0, "delta": delta, "finish_reason": finish}
        return _sse({**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    yield chunk({"role": "assistant", "content": ""})
    async for event in answer_events(workspace, turn.question, turn.k, turn.history, ticket):
        if isinstance(event, Piece):
            yield chunk({"content": event.text})
        elif isinstance(event, Done):
            answer = event.answer
            finish = FINISH.get(answer.finish_reason, "stop")
            yield chunk({"content": tail(answer)}, finish, **_evidence_fields(answer))
        elif isinstance(event, Failed):
            yield _sse({"error": {"message": event.message, "type": "invalid_request_error", "code": 400}})
    yield b"data: [DONE]\n\n"
