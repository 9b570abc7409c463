"""A backend whose turns follow a script, scored by the real model as it decodes.

A random tiny model almost never writes a valid ``<search>`` or tool call, so the environments
would never insert an image. ``ScriptedBackend`` asks a ``Script`` for each context's next turn:
a text, which it forces through the model's own cached decoding, the rollout's sampling loop with
each step's token given, or None, for which the model samples freely through the rollout's own
backend (``HFBackend``; or ``sampler``, a vLLM engine, so one episode mixes the engines of a
run). Either way the ids are real tokenizer ids and the log-probs are the model's raw
``log_softmax(logits / T)`` at each decoding step, what a sampler records; forcing changes which
token is taken, never the distribution it is scored under.

A forced text is tokenised in random pieces (``split_tokens``): a sampling policy emits such
non-canonical id sequences all the time, and a trainer that re-tokenises text instead of keeping
the sampled ids then scores different tokens.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from evidra.models.context import Context, collate_left
from evidra.models.decode import decode
from evidra.models.generation import FinishReason, Generation, SamplingParams
from evidra.models.loading import VLM
from evidra.models.prefix import PREFIX_ARCHS
from evidra.rollout.loop import GenerationBackend, HFBackend

if TYPE_CHECKING:
    from torch import Tensor

    from evidra.models.hf_types import Processor, Tokenizer

Script = Callable[[Context, SamplingParams], "Turn | None"]  # None: let the model sample this turn


@dataclass(frozen=True)
class Turn:
    """A scripted policy turn: its text, and whether the policy then writes end-of-turn."""

    text: str
    end_of_turn: bool = False


def split_tokens(tokenizer: Tokenizer, text: str, rng: random.Random, max_piece: int = 8) -> list[int]:
    """Ids of ``text`` tokenised in random pieces of 1 to ``max_piece`` characters: they decode to
    ``text`` but are usually not the tokenizer's own (canonical) ids for it."""
    pieces: list[str] = []
    start = 0
    while start < len(text):
        end = min(len(text), start + rng.randint(1, max_piece))
        pieces.append(text[start:end])
        start = end
    if not pieces:
        return []
    # one batched call: each piece is still tokenised on its own, at a fraction of the overhead
    return [i for piece in tokenizer(pieces, add_special_tokens=False)["input_ids"] for i in piece]


class ScriptedBackend:
    """Turns from ``script`` (forced through the model) or sampled by the model, with log-probs."""

    def __init__(
        self,
        vlm: VLM,
        script: Script,
        rng: random.Random,
        free_tokens: int = 8,
        sampler: GenerationBackend | None = None,
    ) -> None:
        self.vlm, self.script, self.rng, self.free_tokens = vlm, script, rng, free_tokens
        self.sampler = (
            sampler if sampler is not None else HFBackend(vlm)
        )  # samples the free turns (a vLLM engine, say)

    @property
    def processor(self) -> Processor:
        return self.vlm.processor

    def generate(self, contexts: Sequence[Context], params: SamplingParams) -> list[Generation]:
        turns = [self.script(c, params) for c in contexts]
        out: list[Generation | None] = [None] * len(contexts)
        free = [i for i, t in enumerate(turns) if t is None]
        if free:
            short = replace(params, max_new_tokens=min(params.max_new_tokens, self.free_tokens))
            for i, gen in zip(free, self.sampler.generate([contexts[i] for i in free], short), strict=True):
                out[i] = gen
        forced = [(i, t) for i, t in enumerate(turns) if t is not None]
        if forced:
            targets = [self._ids(t, params.max_new_tokens) for _, t in forced]
            gens = forced_generation(self.vlm, [contexts[i] for i, _ in forced], targets, params)
            for (i, _), gen in zip(forced, gens, strict=True):
                out[i] = gen
        assert all(g is not None for g in out)
        return [g for g in out if g is not None]

    def _ids(self, turn: Turn, cap: int) -> list[int]:
        ids = split_tokens(self.vlm.tokenizer, turn.text, self.rng)
        if turn.end_of_turn:
            ids.append(self.vlm.eos_token_ids[0])
        return ids[:cap]


def forced_generation(
    vlm: VLM, contexts: Sequence[Context], targets: Sequence[Sequence[int]], params: SamplingParams
) -> list[Generation]:
    """Decode ``targets[i]`` after ``contexts[i]`` the way the rollout samples (evidra's decoding loop
    for Qwen2-VL / Qwen2.5-VL, ``model.generate`` otherwise: KV cache, left-padded batch), each
    step forced to the target token; log-probs from the raw logits (``/ T``)."""
    import torch

    width = max(len(t) for t in targets)
    eos = vlm.eos_token_ids[0]
    table = torch.full((len(targets), width + 1), eos, dtype=torch.long)  # (B, T + 1): eos after each
    for row, ids in enumerate(targets):
        table[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    table = table.to(vlm.device)
    temperature = params.temperature if not params.greedy else 1.0
    with torch.no_grad():
        if vlm.arch in PREFIX_ARCHS:
            sampled = replace(params, max_new_tokens=width, min_new_tokens=0)
            _, logprobs = decode(
                vlm.model,
                contexts,
                sampled,
                pad_id=vlm.pad_token_id,
                image_token_id=vlm.image_token_id,
                eos_ids=vlm.eos_token_ids,
                force=table,
            )
        else:
            logprobs = _generate_forced(vlm, contexts, table, width, temperature)
    logprobs = logprobs.float().cpu()  # (B, T)
    return [
        _generation(vlm, context, list(ids), logprobs[row, : len(ids)].tolist(), params)
        for row, (context, ids) in enumerate(zip(contexts, targets, strict=True))
    ]


def _generate_forced(
    vlm: VLM, contexts: Sequence[Context], table: Tensor, width: int, temperature: float
) -> Tensor:
    """Log-probs (B, T) of ``table``'s tokens decoded by ``model.generate`` with a forcing processor."""
    import torch
    from transformers import GenerationConfig, LogitsProcessorList

    inputs = collate_left(contexts, vlm.pad_token_id, vlm.image_token_id)
    config = GenerationConfig(
        max_new_tokens=width,
        do_sample=False,
        eos_token_id=list(vlm.eos_token_ids),
        pad_token_id=vlm.pad_token_id,
        output_logits=True,
        return_dict_in_generate=True,
    )
    out = vlm.model.generate(
        **{k: v.to(vlm.device) for k, v in inputs.items()},
        generation_config=config,
        logits_processor=LogitsProcessorList([_Force(table, inputs["input_ids"].shape[1])]),
    )
    logits = torch.stack(out.logits, dim=1).float() / temperature  # (B, T, V)
    chosen = table[:, : logits.shape[1]]  # (B, T)
    return torch.log_softmax(logits, dim=-1).gather(-1, chosen.unsqueeze(-1)).squeeze(-1)


def _generation(
    vlm: VLM, context: Context, ids: list[int], logprobs: list[float], params: SamplingParams
) -> Generation:
    ended = bool(ids) and ids[-1] in vlm.eos_token_ids
    body = ids[:-1] if ended else ids
    text = vlm.tokenizer.decode(body, skip_special_tokens=False)
    reason: FinishReason = "eos" if ended else "stop" if any(s in text for s in params.stop) else "length"
    return Generation(context.token_ids, tuple(ids), tuple(logprobs), text, reason)


class _Force:
    """A logits processor that leaves only row ``b``'s target token at each decoding step."""

    def __init__(self, table: Tensor, start: int) -> None:
        self.table, self.start = table, start  # (B, T + 1) target ids; prompt width

    def __call__(self, input_ids: Tensor, scores: Tensor) -> Tensor:
        import torch

        step = input_ids.shape[1] - self.start
        keep = self.table[:, step]  # (B,)
        forced = torch.full_like(scores, float("-inf"))
        forced[torch.arange(scores.shape[0], device=scores.device), keep] = 0.0
        return forced
