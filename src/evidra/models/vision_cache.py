"""Encode each image once per RL step when the vision tower is frozen.

One GRPO step runs the vision tower on the same images many times: every group repeats its
prompt G times during generation, then the reference and the policy forward passes encode
them again. With a frozen tower the features are identical each time, so this cache computes
them once per distinct image (keyed by the pixel bytes and grid) and serves every later call.
It patches ``get_image_features`` of Qwen2-VL / Qwen2.5-VL models for the duration of a
``with cache.active():`` block and is cleared on exit. Trainable vision towers are never
cached (``VisionFeatureCache.applicable`` is False).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from transformers import PreTrainedModel
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    from evidra.models.hf_types import HFModel

    ImageFeatures = Callable[..., BaseModelOutputWithPooling]  # (pixel_values, image_grid_thw, **kwargs)

SUPPORTED = ("Qwen2VLModel", "Qwen2_5_VLModel")


def _inner(model: HFModel) -> PreTrainedModel | None:
    """The module that owns ``get_image_features`` and ``visual`` (through PEFT/DDP wrappers)."""
    for module in model.modules():
        if type(module).__name__ in SUPPORTED:
            return module
    return None


class VisionFeatureCache:
    def __init__(self, models: Sequence[HFModel]) -> None:
        self.inners = [m for m in (_inner(model) for model in models) if m is not None]
        self._store: dict[tuple[bytes, tuple[int, ...]], Tensor] = {}
        # random directions of the fingerprint: rows (n,), columns (c, 4)
        self._w: tuple[Tensor, Tensor] | None = None
        self.hits = self.misses = 0

    @property
    def applicable(self) -> bool:
        """True when every cached tower is frozen (no parameter requires grad)."""
        return bool(self.inners) and all(
            not any(p.requires_grad for p in inner.visual.parameters()) for inner in self.inners
        )

    def _key(self, pixels: Tensor, grid: Tensor) -> tuple[bytes, tuple[int, ...]]:
        """Fingerprint of an image's patches ``(n, c)``: the bilinear forms ``r^T X W``, bit-exact.

        ``r`` (n) and ``W`` (c, 4) are fixed random directions. Equal pixels give equal forms
        (same data, same kernel); two different images agree on all four float32 values only by
        coincidence of the random directions, which no natural or synthetic image pair hits.
        It reads the pixels once (``X W`` is a thin matmul), so it costs far less than the tower.
        """
        import torch

        x = pixels.detach().reshape(pixels.shape[0], -1).float()  # (n, c)
        rows, cols = self._weights(x.shape[0], x.shape[1], x.device)
        with torch.autocast(x.device.type, enabled=False):  # fp32 even inside a bf16 training step
            digest = rows @ (x @ cols)  # (n,) @ (n, 4) -> (4,)
        shape = f"{x.shape[0]}x{x.shape[1]}".encode()
        return digest.cpu().numpy().tobytes() + shape, tuple(int(v) for v in grid.tolist())

    def _weights(self, n: int, c: int, device: torch.device) -> tuple[Tensor, Tensor]:
        import torch

        w = self._w
        if w is None or w[0].shape[0] < n or w[1].shape[0] < c or w[0].device != device:
            gen = torch.Generator().manual_seed(0x5EED)
            rows = torch.randn(max(n, 1 << 14), generator=gen).to(device)
            cols = torch.randn(max(c, 1 << 11), 4, generator=gen).to(device)
            self._w = w = (rows, cols)
        return w[0][:n], w[1][:c]

    def _patched(self, original: ImageFeatures) -> ImageFeatures:
        import torch
        from transformers.modeling_outputs import BaseModelOutputWithPooling

        def get_image_features(
            pixel_values: Tensor, image_grid_thw: Tensor | None = None, **kwargs: Any
        ) -> BaseModelOutputWithPooling:
            assert image_grid_thw is not None  # Qwen-VL passes the grid of every image
            sizes = image_grid_thw.prod(-1).tolist()  # patches per image
            chunks = torch.split(pixel_values, sizes)
            keys = [self._key(c, g) for c, g in zip(chunks, image_grid_thw, strict=True)]
            missing = [k for k in dict.fromkeys(keys) if k not in self._store]
            if missing:  # one batched call for every image not seen yet in this block
                idx = [keys.index(k) for k in missing]
                out = original(torch.cat([chunks[i] for i in idx]), image_grid_thw[idx], **kwargs)
                for key, feats in zip(missing, out.pooler_output, strict=True):
                    self._store[key] = _normal(feats.detach())
            self.misses += len(missing)
            self.hits += len(keys) - len(missing)
            return BaseModelOutputWithPooling(pooler_output=tuple(self._store[k] for k in keys))

        return get_image_features

    @contextmanager
    def active(self) -> Iterator[VisionFeatureCache]:
        """Serve cached features inside the block (only if applicable); forget them on exit."""
        with ExitStack() as stack:
            if self.applicable:
                for inner in self.inners:
                    original = inner.get_image_features
                    inner.get_image_features = self._patched(original)
                    stack.callback(delattr, inner, "get_image_features")  # back to the class method
            try:
                yield self
            finally:
                self._store.clear()


def _normal(tensor: Tensor) -> Tensor:
    """``tensor``, or a normal copy of it if it was made under ``torch.inference_mode`` (sampling
    runs there): a later policy forward uses the features under autograd."""
    import torch

    if not tensor.is_inference():
        return tensor
    with torch.inference_mode(False):
        return tensor.clone()
