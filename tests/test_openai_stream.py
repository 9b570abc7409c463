"""Streamed chat completions: server-sent events read under a cap, pieces handed on as they come,
an error event or an early end retried only while no text has gone out."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

import evidra.openai.client as openai_client
from evidra.http.replies import ReplyError
from evidra.openai.client import ChatClient, ChatUnavailableError, endpoint_config
from evidra.openai.stream import EventLines, StreamFailed, chunk_delta, read_stream
from scripted_vlm import Reply, scripted_vlm


async def _chunks(*parts: bytes) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def test_event_lines_join_split_reads_and_refuse_past_the_cap() -> None:
    lines = EventLines(64)
    assert lines.feed(b': comment\ndata: {"a"') == [] and lines.feed(b": 1}\n\n") == ['{"a": 1}']
    with pytest.raises(ReplyError, match="64-byte cap"):
        lines.feed(b"x" * 60)  # one endless line counts too


def test_chunk_delta_reads_text_finish_and_usage_and_raises_error_events() -> None:
    assert chunk_delta({"choices": [{"delta": {"content": "Pol"}}]}) == ("Pol", None, None)
    assert chunk_delta({"choices": [], "usage": {"completion_tokens": 5}}) == ("", None, 5)
    with pytest.raises(StreamFailed, match="out of memory"):
        chunk_delta({"error": {"message": "CUDA  out of memory", "code": 500}})
    with pytest.raises(ReplyError, match="not text"):
        chunk_delta({"choices": [{"delta": {"content": ["a"]}}]})


def test_read_stream_hands_pieces_on_and_returns_a_completion() -> None:
    got: list[str] = []
    events = (
        b'data: {"choices": [{"delta": {"content": "Pol"}}]}\n\n',
        b'data: {"choices": [{"delta": ',
        b'{"content": "aris"}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
    )
    reply = asyncio.run(read_stream(_chunks(*events), 1 << 20, got.append))
    assert got == ["Pol", "aris"] and reply["choices"][0]["message"]["content"] == "Polaris"
    with pytest.raises(StreamFailed, match="stopped before its end, after 3 characters"):
        asyncio.run(read_stream(_chunks(events[0]), 1 << 20, got.append))


def test_the_client_streams_and_retries_only_before_the_first_piece(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openai_client, "retry_delay", lambda *args: 0.0)
    text = "The answer is Polaris."
    replies = (Reply(status=503, error="warming up"), Reply(text))
    with scripted_vlm(*replies) as server:
        got: list[str] = []
        result = ChatClient(endpoint_config(server.url, "m")).chat(
            [{"role": "user", "content": "q"}], on_text=got.append
        )
        assert result.text == text and "".join(got) == text and len(got) > 1
        assert [r["body"].get("stream") for r in server.requests] == [True, True]
    with scripted_vlm(Reply(text, cut=True)) as server:
        with pytest.raises(ChatUnavailableError, match="the stream broke after its text began"):
            ChatClient(endpoint_config(server.url, "m")).chat(
                [{"role": "user", "content": "q"}], on_text=got.append
            )
        assert len(server.requests) == 1
