"""Batched generation with exact sampled token ids and their log-probs, and teacher forcing.

RL needs three things from generation that plain ``model.generate`` text does not give:
the exact token ids that were sampled (never re-tokenised text), the log-prob of each under
the sampling distribution, and where each completion ended and why. Log-probs are those of
``softmax(logits / temperature)`` before top-p/top-k truncation, the quantity verl and TRL use
as the "old" policy log-prob; ``sequence_logprobs`` recomputes the same in one forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evidra.errors import InvalidInputError
from evidra.models.chat import encode_chats
from evidra.models.loading import VLM
from evidra.types import Message

FinishReason = Literal["eos", "stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy decoding."""

    max_new_tokens: int = 256
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    stop: tuple[str, ...] = ()  # stop after the first occurrence of any of these strings
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise InvalidInputError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise InvalidInputError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidInputError(f"top_p must be in (0, 1], got {self.top_p}")
        object.__setattr__(self, "stop", tuple(self.stop))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True)
class Generation:
    """One completion: the exact sampled ids (ending token included), their log-probs, text."""

    prompt_ids: tuple[int, ...]  # unpadded prompt, image placeholders expanded
    token_ids: tuple[int, ...]
    logprobs: tuple[float, ...]
    text: str  # decoded token_ids without the final end-of-turn token
    finish_reason: FinishReason


def _generation_config(vlm: VLM, params: SamplingParams) -> Any:
    from transformers import GenerationConfig

    sampling: dict[str, Any] = {"do_sample": False}
    if not params.greedy:
        sampling = {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p}
        sampling["top_k"] = params.top_k if params.top_k > 0 else None
    return GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        eos_token_id=list(vlm.eos_token_ids),
        pad_token_id=vlm.pad_token_id,
        repetition_penalty=1.0,
        output_logits=True,
        return_dict_in_generate=True,
        stop_strings=list(params.stop) or None,
        **sampling,
    )


def _cut(ids: list[int], eos: set[int], stop: Sequence[str], tokenizer: Any) -> tuple[int, FinishReason]:
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


def generate(vlm: VLM, chats: Sequence[Sequence[Message]], params: SamplingParams) -> list[Generation]:
    """Sample one completion per conversation, all prompts in one left-padded batch."""
    import torch

    inputs = encode_chats(vlm.processor, chats).to(vlm.device)
    prompt_len = inputs["input_ids"].shape[1]
    if params.seed is not None:
        torch.manual_seed(params.seed)
    tokenizer = vlm.tokenizer
    with torch.no_grad():
        out = vlm.model.generate(
            **inputs, generation_config=_generation_config(vlm, params), tokenizer=tokenizer
        )
    sampled = out.sequences[:, prompt_len:]  # (B, T)
    temperature = params.temperature if not params.greedy else 1.0
    logits = torch.stack(out.logits, dim=1).float() / temperature  # (B, T, V)
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, sampled.unsqueeze(-1)).squeeze(-1)  # (B, T)
    eos = set(vlm.eos_token_ids)
    results = []
    for row in range(sampled.shape[0]):
        ids = sampled[row].tolist()
        end, reason = _cut(ids, eos, params.stop, tokenizer)
        ids = ids[:end]
        body = ids[:-1] if reason == "eos" else ids
        prompt = inputs["input_ids"][row][inputs["attention_mask"][row].bool()].tolist()
        results.append(
            Generation(
                prompt_ids=tuple(prompt),
                token_ids=tuple(ids),
                logprobs=tuple(logprobs[row, :end].tolist()),
                text=tokenizer.decode(body, skip_special_tokens=False),
                finish_reason=reason,
            )
        )
    return results


def build_teacher_forcing_batch(
    processor: Any, chats: Sequence[Sequence[Message]], completions: Sequence[Sequence[int]], pad_id: int
) -> tuple[dict[str, Any], Any, Any]:
    """Inputs for scoring ``completions`` after their prompts in one forward pass.

    Prompts are left-padded and completions right-padded, so every completion starts at the
    same column. Returns ``(model_inputs, completion_ids (B, C), completion_mask (B, C))``.
    """
    import torch

    if len(chats) != len(completions):
        raise InvalidInputError(f"{len(chats)} conversations but {len(completions)} completions")
    enc = encode_chats(processor, chats)
    width = max(1, max(len(c) for c in completions))
    ids = torch.full((len(completions), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(completions), width), dtype=torch.long)
    for i, comp in enumerate(completions):
        ids[i, : len(comp)] = torch.tensor(list(comp), dtype=torch.long)
        mask[i, : len(comp)] = 1
    inputs = dict(enc)
    inputs["input_ids"] = torch.cat([enc["input_ids"], ids], dim=1)
    inputs["attention_mask"] = torch.cat([enc["attention_mask"], mask], dim=1)
    if "mm_token_type_ids" in enc:  # per-token modality ids (0 = text) must cover the completion
        inputs["mm_token_type_ids"] = torch.cat([enc["mm_token_type_ids"], torch.zeros_like(ids)], dim=1)
    return inputs, ids, mask


def forward_logprobs(
    model: Any, inputs: dict[str, Any], completion_ids: Any, temperature: float = 1.0
) -> Any:
    """Log-probs ``(B, C)`` of ``completion_ids`` (the last C columns of ``inputs``).

    Differentiable: the trainer calls this under autograd. Only the last C + 1 positions'
    logits are materialised (``logits_to_keep``), so memory does not grow with the prompt.
    """
    import torch

    width = completion_ids.shape[1]
    out = model(**inputs, logits_to_keep=width + 1, use_cache=False)
    logits = out.logits[:, :-1, :].float() / temperature  # (B, C, V): position t predicts t + 1
    return torch.log_softmax(logits, dim=-1).gather(-1, completion_ids.unsqueeze(-1)).squeeze(-1)


def sequence_logprobs(
    vlm: VLM,
    chats: Sequence[Sequence[Message]],
    completions: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
) -> list[list[float]]:
    """Per-token log-probs of given completions, all in one no-grad forward pass."""
    import torch

    inputs, ids, mask = build_teacher_forcing_batch(vlm.processor, chats, completions, vlm.pad_token_id)
    inputs = {k: v.to(vlm.device) if hasattr(v, "to") else v for k, v in inputs.items()}
    with torch.no_grad():
        lp = forward_logprobs(vlm.model, inputs, ids.to(vlm.device), temperature)
    return [lp[i, : int(mask[i].sum())].tolist() for i in range(len(completions))]
