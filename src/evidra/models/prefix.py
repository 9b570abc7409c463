"""Teacher forcing with a shared prompt: encode each distinct prompt once, then all responses.

In GRPO the G responses of a group follow the same prompt (often hundreds of image tokens).
A plain forward pass recomputes that prompt G times. Here the distinct prompts run once with
a KV cache, the cache rows are gathered per response (``index_select``, differentiable, so the
gradient of every response flows back into the one shared prompt computation), and the
responses run on top. The log-probs equal the plain forward's (see tests) at a fraction of the
attention and MLP work.

Only responses without images qualify (single-turn episodes); the caller falls back to the
plain path otherwise. The responses' 3D-rope positions are text positions shifted by each
prompt's offset (``rope_deltas``, left on the model by the prompt pass), passed explicitly.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from evidra.core.errors import InvalidInputError
from evidra.models.context import Context, collate_left

if TYPE_CHECKING:
    from torch import Tensor
    from transformers import PreTrainedModel
    from transformers.utils import ModelOutput

    from evidra.models.hf_types import HFModel, KVCache, ModelInputs

PREFIX_ARCHS = ("qwen2_vl", "qwen2_5_vl")  # checked against the plain forward in tests


@dataclass(eq=False)
class PrefixBatch:
    """Distinct prompts (left-padded) and the right-padded responses that follow them."""

    prompt_inputs: ModelInputs  # (P, Lp) model inputs of the distinct prompts
    prompt_index: Tensor  # (B,) which prompt each response follows
    response_ids: Tensor  # (B, R)
    response_mask: Tensor  # (B, R)


def cache_kwargs(model: HFModel, cache: KVCache | None) -> dict[str, KVCache | None]:
    """The KV cache as the model's forward takes it: ``cache=`` from transformers 5.24 (where
    ``past_key_values=`` is deprecated), ``past_key_values=`` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    forward = getattr(type(base), "forward", None)
    try:
        takes_cache = forward is not None and "cache" in inspect.signature(forward).parameters
    except (TypeError, ValueError):
        takes_cache = False
    return {"cache": cache} if takes_cache else {"past_key_values": cache}


def output_cache(out: ModelOutput) -> KVCache:
    """The KV cache a forward returned (``out.cache`` from transformers 5.24)."""
    fields = getattr(out, "__dataclass_fields__", {})
    return out.cache if "cache" in fields else out.past_key_values


def _rope_owner(model: HFModel) -> PreTrainedModel | None:
    """The module that computes 3D rope positions (``get_rope_index``) and keeps ``rope_deltas``."""
    for module in model.modules():
        if hasattr(module, "rope_deltas") and hasattr(module, "get_rope_index"):
            return module
    return None


def build_prefix_batch(
    prompts: Sequence[Context],
    prompt_index: Sequence[int],
    responses: Sequence[Sequence[int]],
    pad_id: int,
    image_token_id: int,
) -> PrefixBatch:
    import torch

    if len(prompt_index) != len(responses):
        raise InvalidInputError(f"{len(prompt_index)} prompt indices but {len(responses)} responses")
    width = max(1, max(len(r) for r in responses))
    ids = torch.full((len(responses), width), pad_id, dtype=torch.long)  # (B, R)
    mask = torch.zeros_like(ids)
    for i, resp in enumerate(responses):
        if image_token_id in resp:
            raise InvalidInputError("a response with image tokens cannot share its prompt; use collate_split")
        ids[i, : len(resp)] = torch.tensor(list(resp), dtype=torch.long)
        mask[i, : len(resp)] = 1
    inputs = collate_left(prompts, pad_id, image_token_id)
    return PrefixBatch(inputs, torch.tensor(list(prompt_index), dtype=torch.long), ids, mask)


@overload
def prefix_logprobs(
    model: HFModel, batch: PrefixBatch, temperature: float = ..., *, with_entropy: Literal[False] = ...
) -> Tensor: ...
@overload
def prefix_logprobs(
    model: HFModel, batch: PrefixBatch, temperature: float = ..., *, with_entropy: Literal[True]
) -> tuple[Tensor, Tensor]: ...
@overload
def prefix_logprobs(
    model: HFModel, batch: PrefixBatch, temperature: float = ..., *, with_entropy: bool
) -> Tensor | tuple[Tensor, Tensor]: ...
def prefix_logprobs(
    model: HFModel, batch: PrefixBatch, temperature: float = 1.0, *, with_entropy: bool = False
) -> Tensor | tuple[Tensor, Tensor]:
    """Log-probs ``(B, R)`` of each response token, computing each distinct prompt once
    (and the detached entropies ``(B, R)`` with ``with_entropy``, as ``forward_logprobs``)."""
    import torch

    from evidra.models.token_logprobs import token_entropy, token_logprobs

    device = batch.response_ids.device
    prompt = {k: v.to(device) if hasattr(v, "to") else v for k, v in batch.prompt_inputs.items()}
    index = batch.prompt_index.to(device)
    owner = _rope_owner(model)
    if owner is not None:
        owner.rope_deltas = None  # a text-only prompt pass sets none: never read a stale one
    head = model(**prompt, use_cache=True, logits_to_keep=1)  # (P, 1, V) + cache of (P, Lp)
    cache = output_cache(head)
    cache.reorder_cache(index)  # rows per response: (B, heads, Lp, d), differentiable gather
    deltas = owner.rope_deltas if owner is not None else None
    prompt_len = prompt["input_ids"].shape[1]
    width = batch.response_ids.shape[1]
    mask = torch.cat([prompt["attention_mask"].index_select(0, index), batch.response_mask.to(device)], dim=1)
    if deltas is not None:  # 3D rope: text positions after each prompt's last real token + its offset
        positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)[:, prompt_len:]  # (B, R)
        positions = positions + deltas.index_select(0, index)
    else:  # text-only prompts ran on the default positions (padded column index): continue them
        positions = torch.arange(prompt_len, prompt_len + width, device=device).expand(len(index), -1)
    tail = model(
        input_ids=batch.response_ids,
        attention_mask=mask,
        **cache_kwargs(model, cache),
        position_ids=positions.unsqueeze(0).expand(3, -1, -1),
        cache_position=torch.arange(prompt_len, prompt_len + width, device=device),
        use_cache=True,
    )
    first = head.logits.index_select(0, index)  # (B, 1, V): predicts response token 0
    logits = torch.cat([first, tail.logits[:, :-1]], dim=1)  # (B, R, V)
    if owner is not None:
        owner.rope_deltas = None  # never leak offsets into the next, unrelated forward
    logp = token_logprobs(logits, batch.response_ids, temperature)  # (B, R)
    if not with_entropy:
        return logp
    return logp, token_entropy(logits, temperature)  # (B, R)
