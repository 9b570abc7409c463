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

from collections.abc import Callable, Sequence
from typing import Any

from evidra.models.context import Context, collate_left
from evidra.models.prefix import _rope_owner


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


def _choose(logits: Any, params: Any, suppress: Sequence[int]) -> Any:
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
    # exponential race: argmax p_i / E_i with E_i ~ Exp(1) draws i with probability p_i, the same
    # distribution as torch.multinomial at a fraction of its cost on CPU
    probs = scores.softmax(dim=-1)
    return (probs / torch.empty_like(probs).exponential_()).argmax(dim=-1)


def decode(
    model: Any, contexts: Sequence[Context], params: Any, *, pad_id: int, image_token_id: int,
    eos_ids: Sequence[int], suppress: Sequence[int] = (), stopped: Callable[[list[int]], bool] | None = None,
    check_every: int = 4,
) -> tuple[Any, Any]:  # fmt: skip
    """Sample after each context; returns ``(tokens (B, T), logprobs (B, T))`` padded after EOS.

    Rows stop at an EOS token, or (checked every ``check_every`` tokens) once ``stopped`` says
    their tokens so far contain a stop string; the caller cuts at the exact stop position
    (generation is autoregressive, so the tokens before the cut are what an immediate stop
    would have kept; this check only saves the work after it).
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
    cache = head.past_key_values
    cache.reorder_cache(index)
    deltas = (
        owner.rope_deltas.index_select(0, index)
        if owner is not None and owner.rope_deltas is not None
        else None
    )
    if owner is not None:
        owner.rope_deltas = None
    mask = inputs["attention_mask"].index_select(0, index)  # (B, L)
    logits = head.logits[:, -1].index_select(0, index)  # (B, V)
    temperature = 1.0 if params.greedy else params.temperature
    eos = torch.tensor(list(eos_ids), dtype=torch.long, device=device)
    done = torch.zeros(len(rows), dtype=torch.bool, device=device)
    tokens, logprobs = [], []
    for _ in range(params.max_new_tokens):
        token = _choose(logits, params, suppress)  # (B,)
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
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)  # (B, L + 1)
        column = mask.shape[1] - 1
        if deltas is not None:  # 3D rope: next text position after the last real token, plus offset
            pos = (mask.sum(dim=1, keepdim=True) - 1) + deltas  # (B, 1)
        else:  # text-only contexts run on column positions
            pos = torch.full((len(rows), 1), column, dtype=torch.long, device=device)
        step = model(
            input_ids=token[:, None],
            attention_mask=mask,
            past_key_values=cache,
            position_ids=pos.unsqueeze(0).expand(3, -1, -1),
            cache_position=torch.tensor([column], device=device),
            use_cache=True,
        )
        cache = step.past_key_values
        logits = step.logits[:, -1]
    return torch.stack(tokens, dim=1), torch.stack(logprobs, dim=1)
