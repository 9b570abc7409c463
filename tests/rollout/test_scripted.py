"""The scripted backend: forced turns are scored as the model samples; the recorder keeps them."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from PIL import Image

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.context import encode_messages
from evidra.models.generation import SamplingParams, generate_contexts
from evidra.rollout.recording import RecordingBackend
from evidra.rollout.scripted import ScriptedBackend, Turn, forced_generation, split_tokens


def _contexts(vlm: Any) -> list[Any]:
    image = Image.fromarray(np.full((70, 130, 3), 90, dtype=np.uint8))
    chats = [
        [Message("user", (ImagePart(image), TextPart("What does the chart say?")))],
        [Message.text("user", "Name a number.")],
    ]
    return [encode_messages(vlm.processor, chat) for chat in chats]


def test_random_pieces_decode_to_the_text_with_other_ids(tiny_vlms: dict[str, Any]) -> None:
    tok = tiny_vlms["qwen2_5_vl"].tokenizer
    text = '<think>revenue by region</think><tool_call>{"bbox_2d": [12, 40, 200, 311]}</tool_call>'
    ids = split_tokens(tok, text, random.Random(0))
    assert tok.decode(ids) == text
    assert ids != tok(text, add_special_tokens=False)["input_ids"]  # not the canonical tokenisation


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_forcing_sampled_ids_gives_back_their_logprobs(tiny_vlms: dict[str, Any], arch: str) -> None:
    vlm = tiny_vlms[arch]
    contexts = _contexts(vlm)
    params = SamplingParams(max_new_tokens=10, temperature=0.8, seed=5)
    sampled = generate_contexts(vlm, contexts, params)  # the rollout's own sampling path
    forced = forced_generation(vlm, contexts, [g.token_ids for g in sampled], params)
    for s, f in zip(sampled, forced, strict=True):
        assert f.token_ids == s.token_ids and f.text == s.text
        assert np.allclose(f.logprobs, s.logprobs, atol=1e-5), (f.logprobs, s.logprobs)
        assert f.finish_reason == s.finish_reason


def test_scripted_turns_end_as_a_sampler_would_and_are_recorded(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    contexts = _contexts(vlm)
    turns = iter([Turn("<search>revenue</search>"), Turn("<think>no</think>", end_of_turn=True)])
    backend = RecordingBackend(ScriptedBackend(vlm, lambda _c, _p: next(turns), random.Random(1)))
    params = SamplingParams(max_new_tokens=64, stop=("</search>",))
    search, think = backend.generate(contexts, params)
    assert (search.text, search.finish_reason) == ("<search>revenue</search>", "stop")
    assert (think.text, think.finish_reason) == ("<think>no</think>", "eos")
    assert think.token_ids[-1] == vlm.eos_token_ids[0]
    assert all(lp <= 0 for g in (search, think) for lp in g.logprobs)
    assert backend.after(contexts[0].token_ids) == [search]
    assert backend.after(contexts[1].token_ids) == [think]
    assert backend.after(contexts[0].token_ids[:-1]) == []
    backend.clear()
    assert backend.after(contexts[0].token_ids) == []


def test_a_scripted_turn_past_the_token_limit_is_cut(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    backend = ScriptedBackend(
        vlm, lambda _c, _p: Turn("<answer>" + "total " * 20 + "</answer>"), random.Random(2)
    )
    (gen,) = backend.generate(_contexts(vlm)[1:], SamplingParams(max_new_tokens=6, stop=("</answer>",)))
    assert len(gen.token_ids) == 6 and gen.finish_reason == "length"
