"""Qwen2-VL / Qwen2.5-VL decoder layers for one new token per row, in fewer tensor operations.

Sampling runs every decoder layer once per new token on a ``(B, 1, H)`` batch. At small widths
a layer's arithmetic is tiny and its time goes into the ~90 tensor operations of its forward
and the keyword plumbing around them, each paying Python and dispatch overhead: an RMSNorm is
eight operations, the rotary embedding seven per tensor. ``lean_layer`` computes the same layer
with each RMSNorm as one ``torch.nn.functional.rms_norm``, the rotary embedding of q and k
together as ``x * cos + roll(x, d / 2) * sin'`` (``sin'`` carries rotate-half's sign: four
operations for both), and the query's heads packed onto their key/value head for one token
as transformers does. Projections and the MLP are the layer's own modules, so LoRA adapters
apply; no weight is copied. The result equals the layer's own forward to float rounding
(tests compare sampled tokens and log-probs with transformers' ``generate``).

``usable`` admits only the stock layer classes with sdpa attention; a layer wrapped by
FSDP2 (another class) or with another attention runs its own forward.
"""

from __future__ import annotations

from typing import Any

_LAYERS = ("Qwen2VLDecoderLayer", "Qwen2_5_VLDecoderLayer")
_ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj", "head_dim", "scaling", "layer_idx")


def usable(text: Any) -> bool:
    """Whether ``lean_layer`` computes every decoder layer of the text model ``text``."""
    if text.config._attn_implementation != "sdpa":
        return False
    return all(
        type(layer).__name__ in _LAYERS
        and all(hasattr(layer.self_attn, n) for n in _ATTENTION)
        and all(hasattr(norm, "variance_epsilon") for norm in (layer.input_layernorm, layer.post_attention_layernorm))
        for layer in text.layers
    )


def signed_rotary(cos: Any, sin: Any) -> tuple[Any, Any]:
    """``(cos, sin')`` (B, 1, 1, d) from the text model's rotary embedding (B, 1, d) each, with
    ``rotate_half(x) * sin == roll(x, d / 2) * sin'``: the first half of ``sin`` negated."""
    import torch

    half = sin.shape[-1] // 2
    return cos[:, None], torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)[:, None]


def lean_layer(layer: Any, hidden: Any, cos: Any, sin: Any, mask: Any, cache: Any) -> Any:
    """One decoder layer for ``hidden`` (B, 1, H), rotary ``(cos, sin')`` from ``signed_rotary``,
    attention ``mask`` (B, 1, 1, L); ``cache.update`` stores the new key and value."""
    import torch
    import torch.nn.functional as F

    attn = layer.self_attn
    b, d = hidden.shape[0], attn.head_dim
    x = _rms(layer.input_layernorm, hidden)
    q = attn.q_proj(x).view(b, -1, 1, d)  # (B, heads, 1, d)
    k = attn.k_proj(x).view(b, -1, 1, d)  # (B, kv heads, 1, d)
    heads, kv = q.shape[1], k.shape[1]
    qk = torch.cat([q, k], dim=1)
    qk = qk * cos + torch.roll(qk, d // 2, dims=-1) * sin
    keys, values = cache.update(qk[:, heads:], attn.v_proj(x).view(b, kv, 1, d), attn.layer_idx)
    q = qk[:, :heads].reshape(b, kv, heads // kv, d)  # each query head on its key/value head
    out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, scale=attn.scaling)
    hidden = hidden + attn.o_proj(out.reshape(b, 1, heads * d))
    return hidden + layer.mlp(_rms(layer.post_attention_layernorm, hidden))


def _rms(norm: Any, x: Any) -> Any:
    import torch.nn.functional as F

    return F.rms_norm(x, x.shape[-1:], norm.weight, norm.variance_epsilon)
