"""A streamed chat completion (``"stream": true``): server-sent events read under a cap.

An OpenAI-compatible server streams ``data: {chat.completion.chunk}`` lines and ends with
``data: [DONE]``. ``read_stream`` hands each piece of text to ``on_text`` as it arrives and
returns the whole reply in the shape of a non-streamed one (so ``parse_completion`` reads both).
Every byte counts against ``cap``, a line included, so a server cannot grow one line without
end; an ``{"error": ...}`` event (vLLM sends one when generation fails mid-way) is
``StreamFailed``, and so is a stream that stops before its end (no finish reason, no
``[DONE]``); a chunk that is not one is a ``ReplyError``.

>>> lines = EventLines(1 << 10)
>>> lines.feed(b'data: {"a": 1}\\n\\nda'), lines.feed(b"ta: [DONE]\\n")
(['{"a": 1}'], ['[DONE]'])
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

from evidra.core.errors import EvidraError
from evidra.core.jsonvalue import JSON, JSONObject, at, need_int, need_object
from evidra.http.replies import ReplyError, loads

DONE = "[DONE]"


class StreamFailed(EvidraError, RuntimeError):
    """The server reported an error inside the stream (after its 200)."""


class EventLines:
    """The ``data:`` payloads of server-sent events fed as bytes, at most ``cap`` bytes in all."""

    def __init__(self, cap: int) -> None:
        self.cap, self.seen = cap, 0
        self._rest = b""

    def feed(self, raw: bytes) -> list[str]:
        self.seen += len(raw)
        if self.seen > self.cap:
            raise ReplyError(f"a stream over the {self.cap}-byte cap (reading stopped there)")
        *lines, self._rest = (self._rest + raw).split(b"\n")
        out = []
        for line in lines:
            if line.startswith(b"data:"):
                out.append(line[5:].strip().decode("utf-8", "replace"))
        return out


def chunk_delta(data: JSON) -> tuple[str, str | None, int | None]:
    """The text piece, finish reason and completion tokens (when reported) of one chunk."""
    if isinstance(data, dict) and data.get("error") is not None:
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else error
        raise StreamFailed(" ".join(str(message).split())[:200] or "an error event")
    try:
        chunk = need_object(data, "the chunk")
        usage = chunk.get("usage") or {}
        reported = isinstance(usage, dict) and "completion_tokens" in usage
        tokens = need_int(at(usage, "completion_tokens"), "completion_tokens") if reported else None
        if not chunk.get("choices"):
            return "", None, tokens  # a usage-only chunk
        choice = need_object(at(chunk, "choices", 0), "a choice")
        piece = need_object(choice.get("delta") or {}, "a delta").get("content") or ""
        finish = choice.get("finish_reason")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
        raise ReplyError(
            f"a stream chunk that is not a chat.completion.chunk ({type(exc).__name__})"
        ) from None
    if not isinstance(piece, str):
        raise ReplyError(f"a stream chunk whose content is {type(piece).__name__}, not text")
    return piece, str(finish) if finish else None, tokens


async def read_stream(chunks: AsyncIterator[bytes], cap: int, on_text: Callable[[str], None]) -> JSONObject:
    """The streamed reply as a chat completion; each non-empty text piece goes to ``on_text``."""
    lines = EventLines(cap)
    pieces: list[str] = []
    finish: str | None = None
    tokens = 0
    async for raw in chunks:
        for data in lines.feed(raw):
            if data == DONE:
                return _completion("".join(pieces), finish or "stop", tokens)
            piece, ended, counted = chunk_delta(loads(data))
            finish, tokens = ended or finish, counted if counted is not None else tokens
            if piece:
                pieces.append(piece)
                on_text(piece)
    if finish is None:  # the connection closed early: worth another attempt if nothing was handed on
        raise StreamFailed(f"the stream stopped before its end, after {len(''.join(pieces))} characters")
    return _completion("".join(pieces), finish, tokens)


def _completion(text: str, finish: str, tokens: int) -> JSONObject:
    choice: JSONObject = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": finish,
    }
    return {"choices": [choice], "usage": {"completion_tokens": tokens}}
