from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.context import encode_messages
from evidra.models.decode import _choose, _distinct
from evidra.models.generation import SamplingParams, generate_contexts


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


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_layer_loop_is_used_and_equals_the_whole_model_step(
    tiny_vlms: dict[str, Any], arch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evidra.models import decode as dec

    vlm = tiny_vlms[arch]
    assert dec._TextStack.find(vlm.model) is not None  # the fast path applies to these checkpoints
    contexts = _contexts(vlm, True)
    params = SamplingParams(max_new_tokens=10, temperature=0.8)
    torch.manual_seed(3)
    fast = generate_contexts(vlm, contexts, params)
    monkeypatch.setattr(dec._TextStack, "find", staticmethod(lambda model: None))
    torch.manual_seed(3)
    slow = generate_contexts(vlm, contexts, params)  # whole model per token, transformers' cache
    for a, b in zip(fast, slow, strict=True):
        assert a.token_ids == b.token_ids
        assert np.allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_layer_loop_runs_lora_adapters(tiny_dirs: dict[str, Any]) -> None:
    from evidra.models.adapters import LoraSpec, apply_lora
    from evidra.models.loading import load_vlm

    vlm = apply_lora(load_vlm(tiny_dirs["qwen2_5_vl"]), LoraSpec(r=4, alpha=8))
    with torch.no_grad():  # a non-zero adapter, so a path that skipped it would differ
        for name, param in vlm.model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    contexts = _contexts(vlm, True)
    greedy = SamplingParams(max_new_tokens=10, temperature=0)
    ours = generate_contexts(vlm, contexts, greedy)
    theirs = generate_contexts(vlm, contexts, greedy, engine="hf")
    for a, b in zip(ours, theirs, strict=True):
        assert a.token_ids == b.token_ids
        assert np.allclose(a.logprobs, b.logprobs, atol=1e-4)


def test_inverse_cdf_draws_follow_the_probabilities(monkeypatch: pytest.MonkeyPatch) -> None:
    from evidra.models.decode import _inverse_cdf

    torch.manual_seed(0)
    probs = torch.tensor([[0.0, 0.5, 0.0, 0.3, 0.2, 0.0], [0.1, 0.0, 0.0, 0.0, 0.0, 0.9]])
    n = 20000
    draws = torch.stack([_inverse_cdf(probs) for _ in range(n)])  # (n, 2)
    for row in range(2):
        freq = torch.bincount(draws[:, row], minlength=6).float() / n
        assert (freq[probs[row] == 0] == 0).all()  # no mass, never drawn
        # binomial standard error at p = 0.5 over 20k draws is 0.0035: 5 sigma
        assert torch.allclose(freq, probs[row], atol=0.018)
    # the rounding edge: u * total can equal total, and the last token has no mass
    edge = torch.tensor([[0.25, 0.75, 0.0]])
    monkeypatch.setattr(torch, "rand", lambda *shape, **kw: torch.ones(*shape))  # u = 1 exactly
    assert _inverse_cdf(edge).tolist() == [1]


@pytest.mark.parametrize("engine", ["auto", "hf"])
def test_min_new_tokens_holds_end_of_turn_back(tiny_vlms: dict[str, Any], engine: str) -> None:
    """With the end-of-turn token made the likeliest, a free run ends at once; ``min_new_tokens``
    keeps it out for that many tokens (equal to the cap: every row exactly that long)."""
    vlm = tiny_vlms["qwen2_5_vl"]
    eos = vlm.eos_token_ids[0]

    def favour_eos(module: Any, args: Any, out: Any) -> Any:
        out = out.clone()
        out[..., eos] += 50.0
        return out

    contexts = _contexts(vlm, True)
    handle = vlm.model.get_output_embeddings().register_forward_hook(favour_eos)
    try:
        greedy = SamplingParams(max_new_tokens=8, temperature=0)
        free = generate_contexts(vlm, contexts, greedy, engine=engine)
        held = SamplingParams(max_new_tokens=8, temperature=0, min_new_tokens=3)
        late = generate_contexts(vlm, contexts, held, engine=engine)
        fixed = SamplingParams(max_new_tokens=8, temperature=1.0, min_new_tokens=8, seed=0)
        full = generate_contexts(vlm, contexts, fixed, engine=engine)
    finally:
        handle.remove()
    assert all(g.token_ids == (eos,) and g.finish_reason == "eos" for g in free)
    assert all(len(g.token_ids) == 4 and g.token_ids[-1] == eos and eos not in g.token_ids[:3] for g in late)
    assert all(len(g.token_ids) == 8 and eos not in g.token_ids and g.finish_reason == "length" for g in full)
    assert all(len(g.logprobs) == 8 for g in full)


def test_min_new_tokens_is_checked_and_capped() -> None:
    from evidra.core.errors import InvalidInputError
    from evidra.models.vllm_backend import sampling_kwargs

    with pytest.raises(InvalidInputError, match="min_new_tokens"):
        SamplingParams(min_new_tokens=-1)
    params = SamplingParams(max_new_tokens=8, min_new_tokens=20)
    assert params.min_tokens == 8
    assert sampling_kwargs(params, (1,), 0, max_tokens=5)["min_tokens"] == 5  # vLLM's name, row's cap
    assert "min_tokens" not in sampling_kwargs(SamplingParams(), (1,), 0)
