from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from evidra.models.context import encode_messages
from evidra.models.decode import _choose, _distinct
from evidra.models.generation import SamplingParams, generate_contexts
from evidra.types import ImagePart, Message, TextPart


def _contexts(vlm: Any, image: bool) -> list[Any]:
    out = []
    for seed, words in ((0, 2), (1, 7)):
        img = Image.fromarray(
            np.random.default_rng(seed).integers(0, 255, (120, 90 + 30 * seed, 3), dtype=np.uint8)
        )
        text = TextPart(" ".join(["table"] * words) + "?")
        out.append(
            encode_messages(vlm.processor, [Message("user", (ImagePart(img), text) if image else (text,))])
        )
    return [out[0], out[0], out[1], out[0]]  # shared prompts, as in a GRPO group, plus a left-padded one


@pytest.mark.parametrize("image", [True, False], ids=["images", "text-only"])
@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_decoder_matches_transformers_generate(tiny_vlms: dict[str, Any], arch: str, image: bool) -> None:
    vlm = tiny_vlms[arch]
    contexts = _contexts(vlm, image)
    greedy = SamplingParams(max_new_tokens=12, temperature=0)
    ours = generate_contexts(vlm, contexts, greedy)
    theirs = generate_contexts(vlm, contexts, greedy, engine="hf")
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert np.allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_distinct_contexts_are_prefilled_once(tiny_vlms: dict[str, Any]) -> None:
    contexts = _contexts(tiny_vlms["qwen2_5_vl"], True)
    unique, index = _distinct(contexts)
    assert len(unique) == 2 and index == [0, 0, 1, 0]


def test_sampling_filters() -> None:
    logits = torch.log(torch.tensor([[0.95, 0.03, 0.02], [0.2, 0.5, 0.3]]))
    torch.manual_seed(0)
    nucleus = SamplingParams(temperature=1.0, top_p=0.75)  # smallest set with mass >= 0.75
    picks = torch.stack([_choose(logits, nucleus, ()) for _ in range(200)])  # (200, 2)
    assert (picks[:, 0] == 0).all()  # 0.95 alone covers top_p = 0.9
    assert (
        set(picks[:, 1].tolist()) <= {1, 2} and len(set(picks[:, 1].tolist())) == 2
    )  # 0.5 + 0.3 >= 0.9 - keeps 2
    top1 = SamplingParams(temperature=1.0, top_k=1)
    assert _choose(logits, top1, ()).tolist() == [0, 1]
    assert _choose(logits, SamplingParams(temperature=0), (0,)).tolist() == [
        1,
        1,
    ]  # suppressed token never chosen


def test_stop_strings_end_decoding_early(tiny_vlms: dict[str, Any]) -> None:
    from evidra.models.decode import decode

    vlm = tiny_vlms["qwen2_5_vl"]
    contexts = _contexts(vlm, True)[:1]
    greedy = SamplingParams(max_new_tokens=40, temperature=0)
    (free,) = generate_contexts(vlm, contexts, greedy)
    stop = vlm.tokenizer.decode(list(free.token_ids[:6]))[-3:]  # completed within the first 6 tokens
    (cut,) = generate_contexts(vlm, contexts, SamplingParams(max_new_tokens=40, temperature=0, stop=(stop,)))
    assert cut.finish_reason == "stop" and cut.token_ids == free.token_ids[: len(cut.token_ids)]

    def stopped(ids: list[int]) -> bool:
        return stop in vlm.tokenizer.decode(ids)

    kwargs = {"pad_id": vlm.pad_token_id, "image_token_id": vlm.image_token_id, "eos_ids": vlm.eos_token_ids}
    with torch.no_grad():
        tokens, _ = decode(vlm.model, contexts, greedy, stopped=stopped, check_every=4, **kwargs)
    assert len(cut.token_ids) <= tokens.shape[1] <= len(cut.token_ids) + 4 < 40  # stopped, not run to 40
