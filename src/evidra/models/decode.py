"""A lean sampling loop for Qwen2-VL / Qwen2.5-VL with shared prompts.

``transformers``' ``generate`` is general and pays for it on every token (logits processors,
stopping criteria, cache bookkeeping, 3D-rope recomputation), and it prefills every row even
when G rows of a GRPO group carry the same prompt. This loop prefills each distinct context
once, gathers its KV cache rows for the episodes that share it, and decodes all rows with one
forward per token. Token choice follows ``SamplingParams`` (temperature, top-p, top-k, vision
tokens suppressed); the recorded log-prob of each token is that of ``softmax(logits / T)``,
exactly what ``forward_logprobs`` recomputes (tests check both against ``generate``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from evidra.models.context import Context, collate_left
from evidra.models.prefix import _rope_owner, cache_kwargs, output_cache

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from transformers import PreTrainedModel

    from evidra.models.hf_types import HFModel, KVCache
    from evidra.models.sampling import SamplingParams


class TokenMask(Protocol):
    """Constrains which tokens may come next (``evidra.models.grammar.GrammarMask``)."""

    def __call__(self, logits: Tensor) -> Tensor:
        """``logits`` (B, V) with every forbidden token at ``-inf``."""

    def accept(self, tokens: Tensor) -> None:
        """Advance each row by its drawn token (B,); a negative id skips the row (it has ended)."""


def _distinct(contexts: Sequence[Context]) -> tuple[list[Context], list[int]]:
    """Distinct contexts (same object or same tokens and images) and each row's index."""
    seen: dict[int, int] = {}
    by_tokens: dict[tuple[tuple[int, ...], int], int] = {}
    unique: list[Context] = []
    index = []
    for ctx in contexts:
        key = id(ctx)
        if key not in seen:
            token_key = (ctx.token_ids, id(ctx.pixel_values))
            if token_key not in by_tokens:
                by_tokens[token_key] = len(unique)
                unique.append(ctx)
            seen[key] = by_tokens[token_key]
        index.append(seen[key])
    return unique, index


def _choose(logits: Tensor, params: SamplingParams, suppress: Sequence[int]) -> Tensor:
    """Next tokens (B,) from raw logits (B, V) under the sampling parameters."""
    import torch

    scores = logits.float().clone()
    if suppress:
        scores[:, list(suppress)] = float("-inf")
    if params.greedy:
        return scores.argmax(dim=-1)
    scores = scores / params.temperature
    if params.top_k > 0:
        kth = torch.topk(scores, min(params.top_k, scores.shape[-1]), dim=-1).values[:, -1:]
        scores = scores.masked_fill(scores < kth, float("-inf"))
    if params.top_p < 1.0:
        ordered, order = scores.sort(dim=-1, descending=True)
        probs = ordered.softmax(dim=-1)
        drop = probs.cumsum(dim=-1) - probs > params.top_p  # keep the smallest set reaching top_p
        scores = scores.scatter(-1, order, ordered.masked_fill(drop, float("-inf")))
    return _inverse_cdf(scores.softmax(dim=-1))


def _inverse_cdf(probs: Tensor) -> Tensor:
    """One draw per row of ``probs`` (B, V): the first token whose cumulative mass exceeds
    ``u * total`` with ``u ~ U[0, 1)``. The same distribution as ``torch.multinomial``, with one
    random number per row instead of one per vocabulary entry (about 20x less work on CPU).
    Zero-probability tokens have no width, so they are never drawn; the clamp to the last
    token with mass guards the one float edge where ``u * total`` rounds up to ``total``.
    """
    import torch

    cdf = probs.cumsum(dim=-1)  # (B, V)
    u = torch.rand(probs.shape[0], 1, device=probs.device) * cdf[:, -1:]  # (B, 1)
    drawn = torch.searchsorted(cdf, u, right=True).squeeze(-1)  # (B,)
    positions = torch.arange(probs.shape[-1], device=probs.device)
    last = torch.where(probs > 0, positions, 0).amax(dim=-1)  # (B,) last token with mass
    return torch.minimum(drawn, last)


def decode(
    model: HFModel,
    contexts: Sequence[Context],
    params: SamplingParams,
    *,
    pad_id: int,
    image_token_id: int,
    eos_ids: Sequence[int],
    suppress: Sequence[int] = (),
    stopped: Callable[[list[int]], bool] | None = None,
    check_every: int = 4,
    allowed: TokenMask | None = None,
    force: Tensor | None = None,  # (B, T) token ids
) -> tuple[Tensor, Tensor]:
    """Sample after each context; returns ``(tokens (B, T), logprobs (B, T))`` padded after EOS.

    ``force`` (B, >= max_new_tokens) takes its token at each step instead of a sampled one (a
    scripted turn scored as the model decodes it); log-probs are still those of the logits.

    Rows stop at an EOS token (never sampled before ``params.min_tokens`` new tokens), or
    (checked every ``check_every`` tokens) once ``stopped`` says
    their tokens so far contain a stop string; the caller cuts at the exact stop position
    (generation is autoregressive, so the tokens before the cut are what an immediate stop
    would have kept; this check only saves the work after it). With ``allowed`` each token is
    drawn among those it allows (a grammar); the recorded log-probs stay those of the unmasked logits.
    """
    import torch

    unique, rows = _distinct(contexts)
    owner = _rope_owner(model)
    if owner is not None:
        owner.rope_deltas = None
    device = next(model.parameters()).device
    inputs = {k: v.to(device) for k, v in collate_left(unique, pad_id, image_token_id).items()}
    index = torch.tensor(rows, dtype=torch.long, device=device)
    head = model(**inputs, use_cache=True, logits_to_keep=1)  # (P, 1, V)
    deltas = (
        owner.rope_deltas.index_select(0, index).view(-1)
        if owner is not None and owner.rope_deltas is not None
        else None
    )  # (B,)
    if owner is not None:
        owner.rope_deltas = None
    mask = inputs["attention_mask"].index_select(0, index)  # (B, L)
    logits = head.logits[:, -1].index_select(0, index)  # (B, V)
    stack = _TextStack.find(model)
    advance: Callable[[Tensor, Tensor], Tensor]
    if stack is not None:
        advance = functools.partial(
            stack.step, cache=_SlotCache(output_cache(head), index, mask, params.max_new_tokens)
        )
    else:
        advance = _ModelStep(model, output_cache(head), index, mask)
    del head
    # 3D rope: the next text position after the last real token, plus the prompt's offset;
    # text-only contexts run on column positions
    pos = mask.sum(dim=1) - 1 + deltas if deltas is not None else torch.full_like(index, mask.shape[1] - 1)
    temperature = 1.0 if params.greedy else params.temperature
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    done = torch.zeros(len(rows), dtype=torch.bool, device=device)
    tokens: list[Tensor] = []
    logprobs: list[Tensor] = []
    early = (*suppress, *eos_ids)  # before min_new_tokens: end-of-turn tokens are not sampled either
    for _ in range(params.max_new_tokens):
        if force is None:
            scores = logits if allowed is None else allowed(logits)
            token = _choose(scores, params, early if len(tokens) < params.min_tokens else suppress)  # (B,)
        else:
            token = force[:, len(tokens)]  # (B,)
        if allowed is not None:
            allowed.accept(torch.where(done, torch.full_like(token, -1), token))
        token = torch.where(done, torch.full_like(token, pad_id), token)
        lp = torch.log_softmax(logits.float() / temperature, dim=-1).gather(-1, token[:, None]).squeeze(-1)
        tokens.append(token)
        logprobs.append(lp)
        done = done | torch.isin(token, eos)
        if stopped is not None and len(tokens) % check_every == 0:
            so_far = torch.stack(tokens, dim=1).tolist()  # (B, t)
            hit = [not d and stopped(row) for d, row in zip(done.tolist(), so_far, strict=True)]
            done = done | torch.tensor(hit, dtype=torch.bool, device=device)
        if bool(done.all()) or len(tokens) == params.max_new_tokens:
            break
        pos = pos + 1
        logits = advance(token, pos)
    return torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1)


class _ModelStep:
    """One token through the whole model with transformers' own cache (any attention kind)."""

    def __init__(self, model: HFModel, cache: KVCache, index: Tensor, mask: Tensor) -> None:
        cache.reorder_cache(index)
        self.model, self.cache, self.mask = model, cache, mask
        self.cache_kwarg = next(iter(cache_kwargs(model, None)))  # read once, not per token

    def __call__(self, token: Tensor, pos: Tensor) -> Tensor:
        import torch

        self.mask = torch.cat([self.mask, torch.ones_like(self.mask[:, :1])], dim=1)  # (B, L + 1)
        column = self.mask.shape[1] - 1
        out = self.model(
            input_ids=token[:, None],
            attention_mask=self.mask,
            **{self.cache_kwarg: self.cache},
            position_ids=pos.view(1, -1, 1).expand(3, -1, -1),
            cache_position=torch.tensor([column], device=token.device),
            use_cache=True,
        )
        self.cache = output_cache(out)
        return out.logits[:, -1]


class _SlotCache:
    """Key/value buffers sized for prompt + new tokens, filled one column per decoding step.

    Stands in for transformers' ``DynamicCache`` inside the decoder layers, which only call
    ``update``: the new column is written in place instead of concatenating the whole cache
    again for every token and layer. The attention mask (prompt padding False, every generated
    column True) is kept as one ``(B, 1, 1, L)`` tensor whose prefix each step reads.
    """

    def __init__(self, prefill: KVCache, index: Tensor, mask: Tensor, new_tokens: int) -> None:
        import torch

        self.keys: list[Tensor] = []
        self.values: list[Tensor] = []
        for layer in prefill.layers:
            for src, dst in ((layer.keys, self.keys), (layer.values, self.values)):
                rows = src.index_select(0, index)  # (B, H, Lp, d)
                buf = rows.new_empty(rows.shape[0], rows.shape[1], rows.shape[2] + new_tokens, rows.shape[3])
                buf[:, :, : rows.shape[2]] = rows
                dst.append(buf)
        self.length = int(mask.shape[1])  # columns filled so far
        full = torch.ones(mask.shape[0], self.length + new_tokens, dtype=torch.bool, device=mask.device)
        full[:, : self.length] = mask.bool()
        self.mask = full[:, None, None, :]  # (B, 1, 1, L_max)

    def update(
        self, keys: Tensor, values: Tensor, layer_idx: int, *_: object, **__: object
    ) -> tuple[Tensor, Tensor]:
        end = self.length + keys.shape[2]
        self.keys[layer_idx][:, :, self.length : end] = keys
        self.values[layer_idx][:, :, self.length : end] = values
        return self.keys[layer_idx][:, :, :end], self.values[layer_idx][:, :, :end]


@dataclass(frozen=True)
class _TextStack:
    """The decoder layers of a Qwen2-VL / Qwen2.5-VL model, driven directly for one new token.

    The wrappers around them (multimodal input merging, 3D-rope index search, mask building,
    output capture) do nothing for a text token after the prompt but cost as much as the tiny
    layers themselves; the layers, norms and heads are the model's own modules, so LoRA
    adapters and every numeric detail are unchanged (tests compare with ``generate``).
    """

    text: PreTrainedModel  # the *TextModel: embed_tokens, rotary_emb, layers, norm
    head: torch.nn.Module  # lm_head
    cache_kwarg: str = "past_key_values"  # the layers' cache argument ("cache" from transformers 5.24)

    @staticmethod
    def find(model: HFModel) -> _TextStack | None:
        text = next((m for m in model.modules() if type(m).__name__ in _TEXT_MODELS), None)
        getter = getattr(model, "get_output_embeddings", None)  # absent on DDP-style wrappers
        head = getter() if getter is not None else None
        usable = (
            text is not None
            and head is not None
            and set(text.config.layer_types) == {"full_attention"}
            and text.config._attn_implementation in ("sdpa", "eager")
        )
        if not usable or text is None or head is None:
            return None
        params = inspect.signature(text.layers[0].forward).parameters
        return _TextStack(text, head, "cache" if "cache" in params else "past_key_values")

    def step(self, token: Tensor, pos: Tensor, *, cache: _SlotCache) -> Tensor:
        """Logits ``(B, V)`` after feeding ``token`` (B,) at text positions ``pos`` (B,)."""
        hidden = self.text.embed_tokens(token[:, None])  # (B, 1, H)
        rope = self.text.rotary_emb(hidden, pos.view(1, -1, 1).expand(3, -1, -1))
        mask = cache.mask[..., : cache.length + 1]
        for layer in self.text.layers:
            hidden = layer(hidden, attention_mask=mask, position_embeddings=rope, **{self.cache_kwarg: cache})
        cache.length += 1
        return self.head(self.text.norm(hidden)[:, -1])


_TEXT_MODELS = ("Qwen2VLTextModel", "Qwen2_5_VLTextModel")
