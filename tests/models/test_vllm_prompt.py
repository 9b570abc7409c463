"""The vLLM request built from a multi-turn Qwen-VL context (no vLLM needed): the page images
in order, the policy's pixel limits, and ids that vLLM's placeholder expansion turns back into
exactly the trainer's ids."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message, TextPart
from evidra.methods.cave.states import prefix_context
from evidra.models.context import Context, encode_messages, encode_turn
from evidra.models.generation import SamplingParams
from evidra.models.vllm_backend import sampling_kwargs
from evidra.models.vllm_prompt import collapse_placeholders, placeholder_runs, vllm_prompt


def _image(w: int, h: int, seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (h, w, 3), dtype=np.uint8))


def _vllm_expand(ids: tuple[int, ...], image_token_id: int, counts: list[int]) -> tuple[int, ...]:
    """What vLLM 0.32's Qwen-VL prompt update does: the k-th single placeholder -> counts[k] copies."""
    out: list[int] = []
    k = 0
    for t in ids:
        if t == image_token_id and k < len(counts):
            out += [t] * counts[k]
            k += 1
        else:
            out.append(t)
    assert k == len(counts)
    return tuple(out)


@pytest.fixture(scope="module")
def episode(tiny_vlms: dict[str, Any]) -> tuple[Any, Context, tuple[Image.Image, ...]]:
    """Prompt with two pages, a policy turn, then an observation turn with a third page."""
    vlm = tiny_vlms["qwen2_5_vl"]
    pages = (_image(300, 200, 1), _image(120, 260, 2), _image(200, 200, 3))
    prompt = encode_messages(
        vlm.processor, [Message("user", (ImagePart(pages[0]), ImagePart(pages[1]), TextPart("Year?")))]
    )
    turn = vlm.tokenizer.encode("<search>year</search>", add_special_tokens=False)
    observation = encode_turn(
        vlm.processor, [Message("user", (ImagePart(pages[2]), TextPart("Page 3.")))], close_previous=True
    )
    return vlm, prompt.append_ids(turn).extend(observation), pages


def test_contexts_keep_their_images_in_order(episode: Any) -> None:
    _, context, pages = episode
    assert context.num_images == 3
    assert all(a is b for a, b in zip(context.images, pages, strict=True))


def test_the_request_carries_the_pages_and_the_pixel_limits(episode: Any) -> None:
    vlm, context, pages = episode
    spec = vlm.spec
    prompt = vllm_prompt(
        context, vlm.image_token_id, min_pixels=spec.min_pixels, max_pixels=spec.max_pixels
    ).as_tokens_prompt()
    assert [id(i) for i in prompt["multi_modal_data"]["image"]] == [id(p) for p in pages]
    assert prompt["mm_processor_kwargs"] == {"min_pixels": spec.min_pixels, "max_pixels": spec.max_pixels}
    ids = tuple(prompt["prompt_token_ids"])
    assert sum(t == vlm.image_token_id for t in ids) == 3  # one placeholder per image
    counts = [int(g.prod()) // 4 for g in context.image_grid_thw]
    assert len(set(counts)) == 3  # three sizes: an order mix-up would show
    assert _vllm_expand(ids, vlm.image_token_id, counts) == context.token_ids


def test_each_placeholder_sits_inside_its_vision_markers(episode: Any) -> None:
    vlm, context, _ = episode
    tok = vlm.tokenizer
    start, end = tok.convert_tokens_to_ids("<|vision_start|>"), tok.convert_tokens_to_ids("<|vision_end|>")
    ids = collapse_placeholders(context, vlm.image_token_id)
    for i in (i for i, t in enumerate(ids) if t == vlm.image_token_id):
        assert (ids[i - 1], ids[i + 1]) == (start, end)


def test_a_text_only_context_goes_out_unchanged() -> None:
    context = Context((5, 6, 7))
    assert vllm_prompt(context, 9, min_pixels=1, max_pixels=2).as_tokens_prompt() == {
        "prompt_token_ids": [5, 6, 7]
    }


def test_placeholder_runs_by_hand() -> None:
    assert placeholder_runs((9, 9, 1, 9, 2, 9, 9, 9), 9) == [(0, 2), (3, 1), (5, 3)]
    assert placeholder_runs((1, 2), 9) == []


def test_ids_and_images_that_disagree_are_refused() -> None:
    grid = torch.tensor([[1, 2, 4], [1, 2, 2]])  # 8 and 4 patches: 2 and 1 placeholders
    pixels = torch.zeros(12, 4)
    image = _image(8, 8, 0)
    ok = Context((1, 9, 9, 2, 1, 9, 2), pixels, grid, (image, image))
    assert collapse_placeholders(ok, 9) == (1, 9, 2, 1, 9, 2)
    with pytest.raises(InvalidInputError, match=r"lengths \[1, 2\]"):  # images swapped
        collapse_placeholders(Context((1, 9, 2, 1, 9, 9, 2), pixels, grid, (image, image)), 9)
    with pytest.raises(InvalidInputError, match="keeps 0 images"):  # pixel values without images
        vllm_prompt(Context(ok.token_ids, pixels, grid), 9, min_pixels=1, max_pixels=2)


def test_a_prefix_keeps_the_images_it_holds(episode: Any) -> None:
    vlm, context, pages = episode
    third_image = placeholder_runs(context.token_ids, vlm.image_token_id)[2][0]
    prefix = prefix_context(context, third_image - 1, vlm.image_token_id)  # up to its <|vision_start|>
    assert prefix.num_images == 2 and prefix.images == pages[:2]


def test_vision_tokens_are_suppressed_by_logit_bias_only_when_asked() -> None:
    params = SamplingParams(max_new_tokens=4, seed=0)
    assert "logit_bias" not in sampling_kwargs(params, (1,), 0)
    assert sampling_kwargs(params, (1,), 0, (7, 8))["logit_bias"] == {7: -100.0, 8: -100.0}


def test_a_row_never_asks_the_engine_for_more_than_its_context_has_left() -> None:
    from evidra.models.vllm_backend import VLLMBackend, VLLMConfig, VLLMError

    params = SamplingParams(max_new_tokens=64, seed=0)
    assert sampling_kwargs(params, (1,), 0)["max_tokens"] == 64
    assert sampling_kwargs(params, (1,), 0, max_tokens=5)["max_tokens"] == 5
    assert sampling_kwargs(params, (1,), 0, max_tokens=500)["max_tokens"] == 64
    engine = object.__new__(VLLMBackend)  # no engine needed to size a request
    engine.cfg = VLLMConfig(max_model_len=100)
    assert engine._room(Context(tuple(range(90)))) == 10
    with pytest.raises(VLLMError, match="max_model_len=100"):
        engine._room(Context(tuple(range(100))))
