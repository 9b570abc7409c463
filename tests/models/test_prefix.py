from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.context import collate_split, encode_messages
from evidra.models.generation import forward_logprobs
from evidra.models.prefix import build_prefix_batch, prefix_logprobs


def _prompt(vlm: Any, seed: int, words: int, image: bool) -> Any:
    rng = np.random.default_rng(seed)
    text = TextPart(" ".join(["page"] * words) + "?")
    img = ImagePart(Image.fromarray(rng.integers(0, 255, (100 + 20 * seed, 140, 3), dtype=np.uint8)))
    return encode_messages(vlm.processor, [Message("user", (img, text) if image else (text,))])


@pytest.mark.parametrize("image", [True, False], ids=["images", "text-only"])
@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl"])
def test_shared_prefix_equals_plain_forward_with_gradients(
    tiny_vlms: dict[str, Any], arch: str, image: bool
) -> None:
    vlm = tiny_vlms[arch]
    prompts = [_prompt(vlm, 0, 3, image), _prompt(vlm, 1, 9, image)]  # different lengths: left padding
    index = [0, 0, 0, 1, 1, 1]
    rng = np.random.default_rng(0)
    responses = [rng.integers(20, 400, size=n).tolist() for n in (5, 9, 1, 7, 3, 9)]
    params = [p for p in vlm.model.parameters() if p.requires_grad]

    def grads(loss: Any) -> list[Any]:
        return [
            g.clone() for g in torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
        ]

    full = [prompts[i].append_ids(r) for i, r in zip(index, responses, strict=True)]
    inputs, ids, mask = collate_split(
        full, [len(prompts[i]) for i in index], vlm.pad_token_id, vlm.image_token_id
    )
    plain = forward_logprobs(vlm.model, inputs, ids)  # (B, R)
    plain_grads = grads((plain * mask).sum())
    batch = build_prefix_batch(prompts, index, responses, vlm.pad_token_id, vlm.image_token_id)
    shared = prefix_logprobs(vlm.model, batch)  # (B, R)
    shared_grads = grads((shared * batch.response_mask).sum())
    m = mask.bool()
    assert torch.allclose(plain[m], shared[m], atol=2e-5)
    for a, b in zip(plain_grads, shared_grads, strict=True):
        assert torch.allclose(a, b, atol=2e-5, rtol=1e-4)
    again = forward_logprobs(vlm.model, inputs, ids)  # no stale rope offsets leak into the next forward
    assert torch.allclose(again[m], plain[m], atol=1e-6)


def test_responses_with_images_are_refused(tiny_vlms: dict[str, Any]) -> None:
    from evidra.core.errors import InvalidInputError

    vlm = tiny_vlms["qwen2_5_vl"]
    with pytest.raises(InvalidInputError, match="collate_split"):
        build_prefix_batch([_prompt(vlm, 0, 2, True)], [0], [[5, vlm.image_token_id]], 0, vlm.image_token_id)


@pytest.mark.parametrize("image", [True, False], ids=["images", "text-only"])
def test_log_probs_in_chunks_equal_the_whole_through_both_paths(
    tiny_vlms: dict[str, Any], image: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past one chunk the log-probs run chunk by chunk (``evidra.models.token_logprobs``): through the
    plain and the shared-prompt forward, values and weight gradients equal the one-call numbers."""
    from evidra.models import token_logprobs as tl

    vlm = tiny_vlms["qwen2_5_vl"]
    prompts = [_prompt(vlm, 0, 3, image), _prompt(vlm, 1, 9, image)]
    index = [0, 0, 1, 1]
    rng = np.random.default_rng(1)
    responses = [rng.integers(20, 400, size=n).tolist() for n in (6, 2, 9, 4)]
    params = [p for p in vlm.model.parameters() if p.requires_grad]
    full = [prompts[i].append_ids(r) for i, r in zip(index, responses, strict=True)]
    inputs, ids, mask = collate_split(
        full, [len(prompts[i]) for i in index], vlm.pad_token_id, vlm.image_token_id
    )
    batch = build_prefix_batch(prompts, index, responses, vlm.pad_token_id, vlm.image_token_id)

    masks = {False: mask, True: batch.response_mask}

    def run(shared: bool) -> tuple[Any, list[Any]]:
        if shared:
            lp = prefix_logprobs(vlm.model, batch, 0.8)
        else:
            lp = forward_logprobs(vlm.model, inputs, ids, 0.8)
        loss = (lp * masks[shared]).sum()
        grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)
        return lp.detach(), [g.clone() for g in grads]

    whole = {shared: run(shared) for shared in (False, True)}
    vocab = vlm.model.config.get_text_config().vocab_size
    monkeypatch.setattr(tl, "CHUNK_BYTES", 3 * vocab * 4)  # 3 positions per chunk
    for shared in (False, True):
        lp, grads = run(shared)
        m = masks[shared].bool()
        assert torch.allclose(lp[m], whole[shared][0][m], atol=1e-5)
        for a, b in zip(grads, whole[shared][1], strict=True):
            assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
