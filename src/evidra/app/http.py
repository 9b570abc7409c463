"""The app's HTTP limits: options, JSON bodies, questions and ``k`` (refusals: ``evidra.http.server_limits``),
and the streamed reply that holds a question's place until it ends."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import ContentStream, StreamingResponse
from starlette.types import Receive, Scope, Send

from evidra.core.errors import InvalidInputError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.http.server_limits import HttpError, read_body
from evidra.retrieval.service.uvicorn_limits import MAX_CONNECTIONS

if TYPE_CHECKING:
    from evidra.app.workspace import AskTicket

API_KEY_ENV = "EVIDRA_APP_API_KEY"  # read by the CLI; required as a Bearer token (or login) when set
MIB = 1 << 20
MAX_JSON_DEPTH = 32


@dataclass(frozen=True)
class ServeOptions:
    """Limits of ``evidra serve``; the same kind of caps as ``serve-index``."""

    k: int = 3  # pages an answer is given
    max_k: int = 20  # pages a search or an answer may ask for
    max_question_chars: int = 4000
    max_messages: int = 64  # messages of one chat request (or the history of one question)
    max_chat_chars: int = 100_000  # characters of all the messages of one chat request
    max_body: int = 4 * MIB  # JSON bodies (questions, chat requests with their history)
    max_upload: int = 256 * MIB  # one uploaded document
    max_uploads: int = 2  # uploads received, queued or ingested at once (503 beyond)
    idle_timeout_s: float = 30.0  # a request head, and a body, must arrive within this
    max_connections: int = MAX_CONNECTIONS
    api_key: str | None = field(default=None, repr=False)
    access_log: bool = True
    model_name: str = "evidra"  # what /v1/models lists

    def __post_init__(self) -> None:
        caps = (
            self.max_question_chars,
            self.max_body,
            self.max_upload,
            self.max_messages,
            self.max_chat_chars,
            self.max_uploads,
        )
        if not 1 <= self.k <= self.max_k or min(caps) < 1:
            raise InvalidInputError("ServeOptions needs 1 <= k <= max_k and positive size caps")
        if self.idle_timeout_s <= 0 or self.max_connections < 1:
            raise InvalidInputError("ServeOptions needs idle_timeout_s > 0 and max_connections >= 1")
        if self.api_key is not None and not self.api_key.strip():
            raise InvalidInputError(f"the API key is empty; set {API_KEY_ENV} to a secret or leave it unset")


def _depth(value: JSON, limit: int) -> int:
    stack, deepest = [(value, 1)], 0
    while stack:
        item, d = stack.pop()
        deepest = max(deepest, d)
        if deepest > limit:
            break
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        stack.extend((c, d + 1) for c in children)
    return deepest


async def read_json(request: Request, options: ServeOptions) -> JSONObject:
    """A JSON object body (400 for anything else)."""
    body = await read_body(request, options.max_body, options.idle_timeout_s)
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise HttpError(400, "the body is not JSON; send a JSON object") from None
    if not isinstance(value, dict):
        raise HttpError(400, "the body must be a JSON object")
    if _depth(value, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise HttpError(400, f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels")
    return value


def question_of(value: object, options: ServeOptions) -> str:
    if not isinstance(value, str) or not value.strip():
        raise HttpError(400, 'a question is needed: {"question": "..."}')
    if len(value) > options.max_question_chars:
        raise HttpError(413, f"the question has {len(value)} characters, over {options.max_question_chars}")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in value):
        raise HttpError(400, "the question holds a lone surrogate; send valid UTF-8 text")
    return value.strip()


def k_of(value: object, default: int, options: ServeOptions) -> int:
    if value is None or value == "":
        return default
    try:
        k = int(str(value)[:8])
    except ValueError:
        raise HttpError(400, f"k must be a whole number, got {str(value)[:20]!r}") from None
    if not 1 <= k <= options.max_k:
        raise HttpError(400, f"k must be in 1..{options.max_k}, got {k}")
    return k


class HeldStream(StreamingResponse):
    """A streamed answer that holds its question's place (``Workspace.admit``) until the reply
    ends, however it ends (done, the client gone, or never started)."""

    def __init__(
        self,
        ticket: AskTicket,
        content: ContentStream,
        *,
        media_type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(content, media_type=media_type, headers=headers)
        self.ticket = ticket

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.ticket.drop()
