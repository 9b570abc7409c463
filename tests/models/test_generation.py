from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from PIL import Image

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.generation import SamplingParams, generate, sequence_logprobs

ARCHS = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")
# Generation reuses the KV cache; the forward pass recomputes everything. Both are fp32 on CPU,
# so they agree to float rounding (measured max |diff| 4.8e-7); 1e-4 leaves room for BLAS paths.
LOGPROB_TOL = 1e-4


def _image(w: int, h: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))


def _chats() -> list[list[Message]]:
    two_images = Message(
        "user", (ImagePart(_image(300, 200, 1)), ImagePart(_image(120, 260, 2)), TextPart("Year?"))
    )
    one_image = Message(
        "user", (ImagePart(_image(200, 200, 3)), TextPart("Which city has the largest value?"))
    )
    return [[two_images], [Message.text("system", "Answer briefly."), one_image]]


@pytest.mark.parametrize("arch", ARCHS)
def test_sampled_logprobs_equal_forward_pass(tiny_vlms: dict[str, Any], arch: str) -> None:
    vlm = tiny_vlms[arch]
    chats = _chats()
    gens = generate(vlm, chats, SamplingParams(max_new_tokens=12, temperature=0.7, seed=3))
    assert all(len(g.token_ids) == len(g.logprobs) > 0 for g in gens)
    assert all(lp <= 0 for g in gens for lp in g.logprobs)
    forward = sequence_logprobs(vlm, chats, [g.token_ids for g in gens], temperature=0.7)
    for gen, ref in zip(gens, forward, strict=True):
        assert len(ref) == len(gen.token_ids)
        assert np.allclose(gen.logprobs, ref, atol=LOGPROB_TOL)


@pytest.mark.parametrize("arch", ARCHS)
def test_left_padded_batch_equals_each_prompt_alone(tiny_vlms: dict[str, Any], arch: str) -> None:
    vlm = tiny_vlms[arch]
    chats = _chats()
    greedy = SamplingParams(max_new_tokens=10, temperature=0)
    batched = generate(vlm, chats, greedy)
    prompt_lens = [len(g.prompt_ids) for g in batched]
    assert prompt_lens[0] != prompt_lens[1], "prompts must differ in length for padding to matter"
    for chat, together in zip(chats, batched, strict=True):
        (alone,) = generate(vlm, [chat], greedy)
        assert together.prompt_ids == alone.prompt_ids
        assert together.token_ids == alone.token_ids
        assert np.allclose(together.logprobs, alone.logprobs, atol=1e-5)


def test_image_tokens_match_geometry(tiny_vlms: dict[str, Any]) -> None:
    from evidra.core.geometry import num_image_tokens

    for arch in ARCHS:
        vlm = tiny_vlms[arch]
        (gen,) = generate(vlm, [_chats()[0]], SamplingParams(max_new_tokens=1, temperature=0))
        pad = vlm.tokenizer.convert_tokens_to_ids("<|image_pad|>")
        expected = num_image_tokens(300, 200, vlm.spec) + num_image_tokens(120, 260, vlm.spec)
        assert sum(t == pad for t in gen.prompt_ids) == expected


def test_stop_string_cuts_after_first_occurrence(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    chat = _chats()[1]
    (free,) = generate(vlm, [chat], SamplingParams(max_new_tokens=24, temperature=0))
    tokens = free.token_ids
    # pick a stop string that the greedy text contains, ending inside its second half
    prefix_text = vlm.tokenizer.decode(tokens[: len(tokens) // 2 + 2], skip_special_tokens=False)
    stop = prefix_text[-3:]
    (stopped,) = generate(vlm, [chat], SamplingParams(max_new_tokens=24, temperature=0, stop=(stop,)))
    assert stopped.finish_reason == "stop"
    assert stop in stopped.text
    assert stopped.token_ids == tokens[: len(stopped.token_ids)]
    shorter = vlm.tokenizer.decode(stopped.token_ids[:-1], skip_special_tokens=False)
    assert stop not in shorter  # the cut is at the earliest token completing the stop string


def test_eos_ends_completion_and_is_kept(tiny_vlms: dict[str, Any]) -> None:
    import torch

    vlm = tiny_vlms["qwen2_5_vl"]
    eos = vlm.tokenizer.convert_tokens_to_ids("<|im_end|>")
    bias = torch.zeros(vlm.model.lm_head.out_features)
    bias[eos] = 100.0  # make <|im_end|> the certain next token
    hook = vlm.model.lm_head.register_forward_hook(lambda _m, _i, out: out + bias)
    try:
        (gen,) = generate(vlm, [_chats()[1]], SamplingParams(max_new_tokens=8, temperature=0))
    finally:
        hook.remove()
    assert gen.finish_reason == "eos"
    assert gen.token_ids[-1] == eos and gen.text == vlm.tokenizer.decode(gen.token_ids[:-1])


def test_sampling_params_validate() -> None:
    from evidra.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(InvalidInputError, match="max_new_tokens"):
        SamplingParams(max_new_tokens=0)
