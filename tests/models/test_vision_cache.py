from __future__ import annotations

from typing import Any

import numpy as np
import torch
from PIL import Image

from evidra.core.types import ImagePart, Message, TextPart
from evidra.models.context import collate_left, encode_messages
from evidra.models.vision_cache import VisionFeatureCache


def _ctx(vlm: Any, seed: int) -> Any:
    img = Image.fromarray(np.random.default_rng(seed).integers(0, 255, (112, 140, 3), dtype=np.uint8))
    return encode_messages(vlm.processor, [Message("user", (ImagePart(img), TextPart(f"q{seed}")))])


def test_cached_features_equal_fresh_ones_and_dedupe(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    contexts = [_ctx(vlm, 0), _ctx(vlm, 1), _ctx(vlm, 0)]  # the first image appears twice
    inputs = collate_left(contexts, vlm.pad_token_id, vlm.image_token_id)
    with torch.no_grad():
        fresh = vlm.model(**inputs).logits
    for p in vlm.model.model.visual.parameters():
        p.requires_grad_(False)
    try:
        cache = VisionFeatureCache([vlm.model])
        assert cache.applicable
        with cache.active(), torch.no_grad():
            cached = vlm.model(**inputs).logits
            again = vlm.model(**inputs).logits
        assert (cache.misses, cache.hits) == (2, 4)  # 2 distinct images, then everything served
        assert torch.allclose(fresh, cached, atol=1e-6) and torch.equal(cached, again)
        assert "get_image_features" not in vars(vlm.model.model)  # the patch is removed on exit
    finally:
        for p in vlm.model.model.visual.parameters():
            p.requires_grad_(True)
    assert not VisionFeatureCache([vlm.model]).applicable  # a trainable tower is never cached


def test_fingerprint_separates_near_identical_images() -> None:
    cache = VisionFeatureCache([])
    grid = torch.tensor([1, 4, 4])
    x = torch.randn(16, 1176)
    key = cache._key(x, grid)
    assert cache._key(x.clone(), grid) == key  # equal pixels, equal key
    one_value = x.clone()
    one_value[7, 300] += 1e-3
    swapped = x[[1, 0, *range(2, 16)]]  # the same patches in another order
    keys = {key, cache._key(one_value, grid), cache._key(swapped, grid), cache._key(x[:, :1175], grid)}
    assert len(keys) == 4


def test_fingerprint_is_float32_under_bf16_autocast() -> None:
    cache = VisionFeatureCache([])
    grid = torch.tensor([1, 4, 4])
    x = torch.randn(16, 1176)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        key = cache._key(x, grid)  # bf16 matmuls would fail in numpy and round the forms
    assert key == cache._key(x, grid)


def test_features_cached_under_inference_mode_serve_a_later_training_pass(tiny_vlms: dict[str, Any]) -> None:
    """Sampling runs under ``torch.inference_mode``; the features it caches are stored as normal
    tensors, so the policy's forward and backward (under autograd) can use them."""
    vlm = tiny_vlms["qwen2_5_vl"]
    inputs = collate_left([_ctx(vlm, 0), _ctx(vlm, 1)], vlm.pad_token_id, vlm.image_token_id)
    for p in vlm.model.model.visual.parameters():
        p.requires_grad_(False)
    try:
        cache = VisionFeatureCache([vlm.model])
        with cache.active():
            with torch.inference_mode():
                vlm.model(**inputs)
            assert cache._store and not any(f.is_inference() for f in cache._store.values())
            vlm.model(**inputs).logits.sum().backward()  # served from the cache, under autograd
            assert (cache.misses, cache.hits) == (2, 2)
    finally:
        vlm.model.zero_grad(set_to_none=True)
        for p in vlm.model.model.visual.parameters():
            p.requires_grad_(True)
