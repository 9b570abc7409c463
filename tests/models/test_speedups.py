from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evidra.models.speedups import fast_patch_embed


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_linear_patch_embedding_equals_conv3d(tiny_dirs: dict[str, Path], arch: str) -> None:
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(str(tiny_dirs[arch]))
    embed = next(m for m in model.modules() if type(m).__name__.endswith("PatchEmbed"))
    weight = embed.proj.weight
    pixels = torch.randn(37, weight[0].numel(), requires_grad=True)  # 37 patches, flattened
    conv = embed(pixels)
    (conv_grad,) = torch.autograd.grad(conv.square().sum(), weight)
    assert fast_patch_embed(model) == 1
    fast = embed(pixels)
    (fast_grad,) = torch.autograd.grad(fast.square().sum(), weight)
    assert fast.shape == conv.shape
    assert torch.allclose(fast, conv, atol=1e-5) and torch.allclose(
        fast_grad, conv_grad, rtol=1e-4, atol=1e-4
    )
