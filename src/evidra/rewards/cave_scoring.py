"""The teacher-forcing service behind CAVE's credits (CAVE §3.2, App. E, Figure 15).

After a rollout, fixed target sequences are scored under every context state ``s_t`` of each
episode: the gold answer body (belief update) and each textual evidence unit (evidence
acquisition). A state is a prefix of the episode's own token context (ids and the images it
holds), cut where turn t begins, so nothing is re-tokenised. Targets are wrapped as
``<answer> body </answer>`` (an evidence unit as-is) with the body tokenised apart, so its
token interval is exact and only the body is scored (§3.2.1). All states x targets of a
group go through the model in batched no-grad forward passes (``collate_split``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from evidra.models.context import Context, collate_split
from evidra.models.loading import VLM
from evidra.rewards.cave import StateScore

ANSWER_PREFIX = "<answer> "
ANSWER_SUFFIX = " </answer>"


@dataclass(frozen=True)
class Target:
    """Token ids to force after a state; ``body`` is the scored interval ``[start, end)``."""

    ids: tuple[int, ...]
    start: int
    end: int


@dataclass(frozen=True)
class TargetScore:
    mean_logprob: float  # mean log-likelihood of the body tokens
    uncertainty: float  # mean over body positions of top-k entropy / log k, in [0, 1]


def make_target(tokenizer: Any, body: str, prefix: str = "", suffix: str = "") -> Target:
    """Tokenise prefix, body and suffix apart so the body's interval is exact."""

    def enc(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    head, core, tail = enc(prefix), enc(body), enc(suffix)
    return Target(tuple(head + core + tail), len(head), len(head) + len(core))


def prefix_context(context: Context, length: int, image_token_id: int) -> Context:
    """The first ``length`` tokens of ``context`` with exactly the images they hold.

    Images are whole inside a state (states end at turn boundaries), so the images are the
    first ``k`` whose placeholder tokens (grid t*h*w / 4 each) fit in the prefix.
    """
    ids = context.token_ids[:length]
    placeholders = sum(1 for i in ids if i == image_token_id)
    if context.image_grid_thw is None or placeholders == 0:
        return Context(ids)
    sizes = [int(g.prod()) for g in context.image_grid_thw]  # patches per image
    k, tokens, rows = 0, 0, 0
    while k < len(sizes) and tokens + sizes[k] // 4 <= placeholders:
        tokens, rows, k = tokens + sizes[k] // 4, rows + sizes[k], k + 1
    return Context(ids, context.pixel_values[:rows], context.image_grid_thw[:k], context.images[:k])


def _forward(vlm: VLM, states: Sequence[Context], targets: Sequence[Target], top_k: int) -> list[TargetScore]:
    import torch

    full = [s.append_ids(t.ids) for s, t in zip(states, targets, strict=True)]
    inputs, ids, _ = collate_split(full, [len(s) for s in states], vlm.pad_token_id, vlm.image_token_id)
    inputs = {k: v.to(vlm.device) for k, v in inputs.items()}
    with torch.no_grad():
        out = vlm.model(**inputs, logits_to_keep=ids.shape[1] + 1, use_cache=False)
        logits = out.logits[:, :-1, :].float()  # (B, R, V): position r predicts token r
        logp = (
            torch.log_softmax(logits, dim=-1).gather(-1, ids.to(vlm.device).unsqueeze(-1)).squeeze(-1)
        )  # (B, R)
        top = torch.log_softmax(logits.topk(top_k, dim=-1).values, dim=-1)  # (B, R, k): renormalised
        entropy = -(top.exp() * top).sum(-1) / math.log(top_k)  # (B, R) in [0, 1]
    scores = []
    for i, t in enumerate(targets):
        if t.end <= t.start:
            scores.append(TargetScore(0.0, 0.0))
            continue
        body = slice(t.start, t.end)
        scores.append(TargetScore(float(logp[i, body].mean()), float(entropy[i, body].mean())))
    return scores


def score_targets(vlm: VLM, states: Sequence[Context], targets: Sequence[Target], *, top_k: int = 10,
                  batch_size: int = 16) -> list[TargetScore]:  # fmt: skip
    """Teacher-force ``targets[i]`` after ``states[i]``, ``batch_size`` rows per forward pass."""
    out: list[TargetScore] = []
    for lo in range(0, len(states), batch_size):
        out.extend(_forward(vlm, states[lo : lo + batch_size], targets[lo : lo + batch_size], top_k))
    return out


def state_prefixes(
    context: Context, prompt_len: int, turn_starts: Sequence[int], image_token_id: int
) -> list[Context]:
    """``s_t`` for each turn t: the context up to where turn t starts (``turn_starts`` index the response)."""
    return [prefix_context(context, prompt_len + start, image_token_id) for start in turn_starts]


def score_states(vlm: VLM, episodes: Sequence[tuple[Context, int, Sequence[int], str, Sequence[str]]], *,
                 top_k: int = 10, batch_size: int = 16) -> list[list[StateScore]]:  # fmt: skip
    """StateScores of every state of every episode, all in shared batches.

    Each episode is ``(context, prompt_len, turn_starts, answer_body, evidence_units)``.
    """
    tok = vlm.tokenizer
    rows: list[tuple[int, int, int]] = []  # (episode, state, target index: 0 answer, k+1 evidence k)
    states: list[Context] = []
    targets: list[Target] = []
    for e, (ctx, plen, starts, answer, units) in enumerate(episodes):
        answer_t = make_target(tok, answer, ANSWER_PREFIX, ANSWER_SUFFIX)
        unit_ts = [make_target(tok, u) for u in units]
        for s, prefix in enumerate(state_prefixes(ctx, plen, starts, vlm.image_token_id)):
            for j, target in enumerate([answer_t, *unit_ts]):
                rows.append((e, s, j))
                states.append(prefix)
                targets.append(target)
    scores = score_targets(vlm, states, targets, top_k=top_k, batch_size=batch_size)
    table: dict[tuple[int, int], dict[int, TargetScore]] = {}
    for (e, s, j), score in zip(rows, scores, strict=True):
        table.setdefault((e, s), {})[j] = score
    out: list[list[StateScore]] = []
    for e, (_, _, starts, _, units) in enumerate(episodes):
        per = []
        for s in range(len(starts)):
            cell = table[(e, s)]
            per.append(StateScore(cell[0].mean_logprob, cell[0].uncertainty,
                                  tuple(cell[k + 1].mean_logprob for k in range(len(units)))))  # fmt: skip
        out.append(per)
    return out
