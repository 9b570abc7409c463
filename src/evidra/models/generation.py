"""Batched generation with exact sampled token ids and their log-probs, and teacher forcing.

RL needs three things from generation that plain ``model.generate`` text does not give:
the exact token ids that were sampled (never re-tokenised text), the log-prob of each under
the sampling distribution, and where each completion ended and why. Log-probs are those of
``softmax(logits / temperature)`` before top-p/top-k truncation, the quantity verl and TRL use
as the "old" policy log-prob; ``sequence_logprobs`` recomputes the same in one forward pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, overload

from evidra.core.errors import InvalidInputError
from evidra.core.types import Message
from evidra.models.context import Context, collate_left, collate_split, encode_messages
from evidra.models.decode import TokenMask, decode
from evidra.models.loading import VLM
from evidra.models.prefix import PREFIX_ARCHS
from evidra.models.sampling import SamplingParams as SamplingParams  # callers import it from here
from evidra.models.streaming import OnText, TextCallback

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from transformers import GenerationConfig
    from transformers.generation.streamers import BaseStreamer

    from evidra.models.hf_types import HFModel, ModelInputs, Tokenizer

FinishReason = Literal["eos", "stop", "length"]


@dataclass(frozen=True)
class Generation:
    """One completion: the exact sampled ids (ending token included), their log-probs, text."""

    prompt_ids: tuple[int, ...]  # unpadded prompt, image placeholders expanded
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str  # decoded token_ids without the final end-of-turn token
    finish_reason: FinishReason


def _generation_config(vlm: VLM, params: SamplingParams) -> GenerationConfig:
    from transformers import GenerationConfig

    sampling: dict[str, object] = {"do_sample": False}
    if not params.greedy:
        sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
        sampling["top_k"] = params.top_k  # 0 disables it (None would mean transformers' default of 50)
    return GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        min_new_tokens=params.min_tokens or None,
        eos_token_id=list(vlm.eos_token_ids),
        pad_token_id=vlm.pad_token_id,
        repetition_penalty=1.0,
        # vision placeholders are never policy output: a sampled <|image_pad|> would be taken for
        # an image slot by the next forward pass. Log-probs stay those of the raw logits.
        suppress_tokens=list(vlm.vision_token_ids),
        output_logits=True,
        return_dict_in_generate=True,
        stop_strings=list(params.stop) or None,
        **sampling,
    )


def _cut(
    ids: list[int], eos: set[int], stop: Sequence[str], tokenizer: Tokenizer
) -> tuple[int, FinishReason]:
    """Length of the completion inside a padded row of generated ids, and why it ended."""
    end, reason = len(ids), "length"
    for i, tok in enumerate(ids):
        if tok in eos:
            end, reason = i + 1, "eos"
            break
    if stop:

        def has_stop(n: int) -> bool:
            text = tokenizer.decode(ids[:n], skip_special_tokens=False)
            return any(s in text for s in stop)

        if has_stop(end):  # shortest prefix containing a stop string (containment is monotone)
            lo, hi = 1, end
            while lo < hi:
                mid = (lo + hi) // 2
                lo, hi = (lo, mid) if has_stop(mid) else (mid + 1, hi)
            if lo < end or reason == "length":
                end, reason = lo, "stop"
    return end, reason  # type: ignore[return-value]


def _to(inputs: ModelInputs, device: torch.device) -> ModelInputs:
    return {k: v.to(device) if hasattr(v, "to") else v for k, v in inputs.items()}


def generate(
    vlm: VLM,
    chats: Sequence[Sequence[Message]],
    params: SamplingParams,
    *,
    on_text: OnText | None = None,
    mask: TokenMask | None = None,
) -> list[Generation]:
    """Sample one completion per conversation, all prompts in one left-padded batch; with
    ``on_text`` (one conversation only) each new piece of text is handed to it as it is made;
    with ``mask`` (a grammar, ``evidra.models.grammar``) only the tokens it allows are drawn."""
    if on_text is not None and len(chats) != 1:
        raise InvalidInputError(f"on_text streams one conversation, got {len(chats)}")
    contexts = [encode_messages(vlm.processor, chat) for chat in chats]
    if on_text is None:
        return generate_contexts(vlm, contexts, params, mask=mask)
    streamer = TextCallback(vlm.tokenizer, on_text, vlm.eos_token_ids)
    return generate_contexts(vlm, contexts, params, engine="hf", streamer=streamer, mask=mask)


def generate_contexts(
    vlm: VLM,
    contexts: Sequence[Context],
    params: SamplingParams,
    *,
    engine: str = "auto",
    streamer: BaseStreamer | TextCallback | None = None,
    mask: TokenMask | None = None,
) -> list[Generation]:
    """Sample one completion after each tokenized context (multi-turn rollouts call this).

    ``engine="auto"`` uses evidra's shared-prompt sampling loop (``models.decode``) for
    Qwen2-VL / Qwen2.5-VL and transformers' ``generate`` otherwise; ``"hf"`` forces the latter,
    which also takes a transformers ``streamer``. ``mask`` (one row per context) limits the
    tokens drawn; log-probs stay those of the unmasked logits.
    """
    import torch

    if params.seed is not None:
        torch.manual_seed(params.seed)
    with torch.no_grad():
        if engine == "auto" and vlm.arch in PREFIX_ARCHS:
            stopped = _stop_checker(vlm.tokenizer, params.stop) if params.stop else None
            sampled, logprobs = decode(
                vlm.model,
                contexts,
                params,
                pad_id=vlm.pad_token_id,
                image_token_id=vlm.image_token_id,
                eos_ids=vlm.eos_token_ids,
                suppress=vlm.vision_token_ids,
                stopped=stopped,
                allowed=mask,
            )
        else:
            sampled, logprobs = _hf_generate(vlm, contexts, params, streamer, mask)
    return _finish(vlm, contexts, params, sampled.cpu(), logprobs.cpu())


def _stop_checker(tokenizer: Tokenizer, stop: Sequence[str]) -> Callable[[list[int]], bool]:
    def stopped(ids: list[int]) -> bool:
        text = tokenizer.decode(ids, skip_special_tokens=False)
        return any(s in text for s in stop)

    return stopped


def _hf_generate(
    vlm: VLM,
    contexts: Sequence[Context],
    params: SamplingParams,
    streamer: BaseStreamer | TextCallback | None = None,
    mask: TokenMask | None = None,
) -> tuple[Tensor, Tensor]:
    """transformers' ``generate``: sampled ids (B, T) and their log-probs (B, T)."""
    import torch

    from evidra.models.grammar import hf_logits_processor

    inputs = _to(collate_left(contexts, vlm.pad_token_id, vlm.image_token_id), vlm.device)
    prompt_len = inputs["input_ids"].shape[1]
    out = vlm.model.generate(
        **inputs,
        generation_config=_generation_config(vlm, params),
        tokenizer=vlm.tokenizer,
        streamer=streamer,
        logits_processor=[hf_logits_processor(mask)] if mask is not None else None,
    )
    sampled = out.sequences[:, prompt_len:]  # (B, T)
    temperature = params.temperature if not params.greedy else 1.0
    logits = torch.stack(out.logits, dim=1).float() / temperature  # (B, T, V)
    return sampled, torch.log_softmax(logits, dim=-1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)


def _finish(
    vlm: VLM, contexts: Sequence[Context], params: SamplingParams, sampled: Tensor, logprobs: Tensor
) -> list[Generation]:
    """Cut each row at its first end-of-turn token or stop string and package it."""
    tokenizer = vlm.tokenizer
    eos = set(vlm.eos_token_ids)
    results = []
    for row, context in enumerate(contexts):
        ids = sampled[row].tolist()
        end, reason = _cut(ids, eos, params.stop, tokenizer)
        ids = ids[:end]
        body = ids[:-1] if reason == "eos" else ids
        results.append(
            Generation(
                prompt_ids=context.token_ids,
                token_ids=tuple(ids),
                logprobs=tuple(logprobs[row, :end].tolist()),
                text=tokenizer.decode(body, skip_special_tokens=False),
                finish_reason=reason,
            )
        )
    return results


@overload
def forward_logprobs(
    model: HFModel,
    inputs: ModelInputs,
    response_ids: Tensor,
    temperature: float = ...,
    *,
    with_entropy: Literal[False] = ...,
) -> Tensor: ...
@overload
def forward_logprobs(
    model: HFModel,
    inputs: ModelInputs,
    response_ids: Tensor,
    temperature: float = ...,
    *,
    with_entropy: Literal[True],
) -> tuple[Tensor, Tensor]: ...
@overload
def forward_logprobs(
    model: HFModel,
    inputs: ModelInputs,
    response_ids: Tensor,
    temperature: float = ...,
    *,
    with_entropy: bool,
) -> Tensor | tuple[Tensor, Tensor]: ...
def forward_logprobs(
    model: HFModel,
    inputs: ModelInputs,
    response_ids: Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Log-probs ``(B, R)`` of ``response_ids``, the last R columns of ``inputs["input_ids"]``.

    Differentiable: the trainer calls this under autograd. Only the last R + 1 positions'
    logits are materialised (``logits_to_keep``), so memory does not grow with the prompt.
    ``with_entropy`` also returns the (detached) entropy of each position's distribution.
    """
    from evidra.models.token_logprobs import token_entropy, token_logprobs

    width = response_ids.shape[1]
    out = model(**inputs, logits_to_keep=width + 1, use_cache=False)
    logits = out.logits[:, :-1, :]  # (B, R, V): position t predicts t + 1
    logp = token_logprobs(logits, response_ids, temperature)  # (B, R), fp32 without an fp32 copy
    if not with_entropy:
        return logp
    return logp, token_entropy(logits, temperature)  # (B, R)


def teacher_forcing_batch(
    vlm: VLM, chats: Sequence[Sequence[Message]], completions: Sequence[Sequence[int]]
) -> tuple[ModelInputs, Tensor, Tensor]:
    """Model inputs to score ``completions`` after their prompts: ``(inputs, ids (B, R), mask (B, R))``."""
    if len(chats) != len(completions):
        raise InvalidInputError(f"{len(chats)} conversations but {len(completions)} completions")
    prompts = [encode_messages(vlm.processor, chat) for chat in chats]
    full = [p.append_ids(c) for p, c in zip(prompts, completions, strict=True)]
    return collate_split(full, [len(p) for p in prompts], vlm.pad_token_id, vlm.image_token_id)


def sequence_logprobs(
    vlm: VLM,
    chats: Sequence[Sequence[Message]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
) -> list[list[float]]:
    """Per-token log-probs of given completions, all in one no-grad forward pass."""
    import torch

    inputs, ids, mask = teacher_forcing_batch(vlm, chats, completions)
    with torch.no_grad():
        lp = forward_logprobs(vlm.model, _to(inputs, vlm.device), ids.to(vlm.device), temperature)
    return [lp[i, : int(mask[i].sum())].tolist() for i in range(len(completions))]
