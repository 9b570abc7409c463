"""Streamed generation: the pieces handed to ``on_text`` join to the completion's text, a character
split across tokens is held back until whole, and a callback that raises stops generation."""

from __future__ import annotations

from typing import Any

import pytest
from PIL import Image

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.generation import SamplingParams, generate
from evidra.models.streaming import StreamCancelled, TextCallback


def _chat() -> list[Message]:
    image = Image.new("RGB", (160, 120), (200, 180, 40))
    return [Message("user", (ImagePart(image), TextPart("What colour is the page?")))]


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_streamed_pieces_join_to_the_text_generate_returns(tiny_vlms: dict[str, Any], arch: str) -> None:
    vlm = tiny_vlms[arch]
    params = SamplingParams(max_new_tokens=20, temperature=0.0)
    pieces: list[str] = []
    (streamed,) = generate(vlm, [_chat()], params, on_text=pieces.append)
    (whole,) = generate(vlm, [_chat()], params)
    assert len(pieces) > 1 and "".join(pieces) == streamed.text == whole.text
    assert streamed.token_ids == whole.token_ids


def test_a_callback_that_raises_stops_generation(tiny_vlms: dict[str, Any]) -> None:
    seen: list[str] = []

    def leave(piece: str) -> None:
        seen.append(piece)
        raise StreamCancelled

    with pytest.raises(StreamCancelled):
        generate(tiny_vlms["qwen2_5_vl"], [_chat()], SamplingParams(max_new_tokens=20), on_text=leave)
    assert len(seen) == 1


def test_a_split_character_waits_for_its_last_byte_and_end_tokens_are_dropped() -> None:
    class Bytes:  # token ids are bytes; id 0 ends the turn
        def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
            return bytes(ids).decode("utf-8", errors="replace")

    got: list[str] = []
    stream = TextCallback(Bytes(), got.append, end_ids=[0])
    for ids in (
        [1, 2],
        [ord("a")],
        [0xC3],
        [0xA9],
        [ord("!")],
        [0],
    ):  # prompt, then "a", "é" in two bytes, "!"
        stream.put(ids)
    stream.end()
    assert got == ["a", "é", "!"]
    with pytest.raises(ValueError, match="one conversation"):
        generate(None, [[], []], SamplingParams(), on_text=got.append)  # type: ignore[arg-type]
