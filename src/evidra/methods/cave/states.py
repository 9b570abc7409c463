"""The teacher-forcing service behind CAVE's credits (CAVE §3.2, App. E, Figure 15).

After a rollout, fixed target sequences are scored under every context state ``s_t`` of each
episode: the gold answer body (belief update) and each textual evidence unit (evidence
acquisition). A state is a prefix of the episode's own token context (ids and the images it
holds), cut where turn t begins, so nothing is re-tokenised. Targets are wrapped as
``<answer> body </answer>`` (an evidence unit as-is) with the body tokenised apart, so its
token interval is exact and only the body is scored (§3.2.1).

Every state and target of an episode goes through the model in one no-grad forward pass: the
longest state once, each (state, target) packed behind it under a mask that shows it its own
state only (``evidra.models.branches``), so the context and its images are encoded once per
episode instead of once per state x target. A model whose attention takes no such mask uses
the plain path: every state x target its own row, in padded batches (``collate_split``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.methods.cave.credits import StateScore
from evidra.models.branches import Branch, branch_logits, pack, packable, prefix_context
from evidra.models.context import Context, collate_split
from evidra.models.loading import VLM

if TYPE_CHECKING:
    from torch import Tensor

    from evidra.models.hf_types import Tokenizer

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


def make_target(tokenizer: Tokenizer, body: str, prefix: str = "", suffix: str = "") -> Target:
    """Tokenise prefix, body and suffix apart so the body's interval is exact."""

    def enc(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []

    head, core, tail = enc(prefix), enc(body), enc(suffix)
    return Target(tuple(head + core + tail), len(head), len(head) + len(core))


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
        entropy = _entropy(logits, top_k)  # (B, R) in [0, 1]
    scores = []
    for i, t in enumerate(targets):
        if t.end <= t.start:
            scores.append(TargetScore(0.0, 0.0))
            continue
        body = slice(t.start, t.end)
        scores.append(TargetScore(float(logp[i, body].mean()), float(entropy[i, body].mean())))
    return scores


def score_targets(
    vlm: VLM, states: Sequence[Context], targets: Sequence[Target], *, top_k: int = 10, batch_size: int = 16
) -> list[TargetScore]:
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


def _entropy(logits: Tensor, top_k: int) -> Tensor:
    """Top-k entropy / log k of each row of ``logits`` (renormalised over the top k), in [0, 1]."""
    import torch

    top = torch.log_softmax(logits.topk(top_k, dim=-1).values, dim=-1)  # (K, k)
    return -(top.exp() * top).sum(-1) / math.log(top_k)


PackedEpisode = tuple[Context, Sequence[int], Sequence[Target]]  # context, prefix lengths, targets


def score_packed(
    vlm: VLM, episodes: Sequence[PackedEpisode], *, top_k: int = 10, episodes_per_forward: int = 1
) -> list[list[list[TargetScore]]]:
    """``scores[e][t][j]``: episode e's target j teacher-forced after its first ``prefix_lens[t]``
    tokens; each episode is one packed row (``evidra.models.branches``), ``episodes_per_forward``
    rows per forward pass. Each episode is ``(context, prefix_lens, targets)``."""
    import torch

    rows = [
        pack(vlm, ctx, [Branch(n, t.ids) for n in lens for t in targets if t.ids])
        if any(t.ids for t in targets)
        else None
        for ctx, lens, targets in episodes
    ]
    live = [r for r in rows if r is not None]
    results = iter(
        [
            x
            for lo in range(0, len(live), episodes_per_forward)
            for x in branch_logits(vlm, live[lo : lo + episodes_per_forward])
        ]
    )
    out = []
    for (_, lens, targets), row in zip(episodes, rows, strict=True):
        if row is None:
            out.append([[TargetScore(0.0, 0.0) for _ in targets] for _ in lens])
            continue
        logits, ids = next(results)  # (K, V), (K,)
        logp = torch.log_softmax(logits, dim=-1).gather(-1, ids.unsqueeze(-1)).squeeze(-1)  # (K,)
        entropy = _entropy(logits, top_k)  # (K,)
        table, offset = [], 0
        for _ in lens:
            cells = []
            for t in targets:
                body = slice(offset + t.start, offset + t.end)
                empty = t.end <= t.start
                cells.append(
                    TargetScore(0.0, 0.0)
                    if empty
                    else TargetScore(float(logp[body].mean()), float(entropy[body].mean()))
                )
                offset += len(t.ids)
            table.append(cells)
        out.append(table)
    return out


# context, prompt length, turn starts (into the response), answer body, evidence units
Episode = tuple[Context, int, Sequence[int], str, Sequence[str]]


def score_states(
    vlm: VLM,
    episodes: Sequence[Episode],
    *,
    top_k: int = 10,
    batch_size: int = 16,
    packed: bool | None = None,
    episodes_per_forward: int = 1,
) -> list[list[StateScore]]:
    """StateScores of every state of every episode.

    Each episode is ``(context, prompt_len, turn_starts, answer_body, evidence_units)``. Packed
    (the default where the model's attention allows it): each episode is one row holding all of
    its states and targets, ``episodes_per_forward`` rows per forward pass (one: on a CPU thread,
    batching rows measured slower, see docs/agents.md). Otherwise every state x target is its own
    row, ``batch_size`` rows per forward pass.
    """
    tok = vlm.tokenizer
    targets = [
        [make_target(tok, answer, ANSWER_PREFIX, ANSWER_SUFFIX), *(make_target(tok, u) for u in units)]
        for _, _, _, answer, units in episodes
    ]
    if packable(vlm) if packed is None else packed:
        work = [
            (ctx, [plen + s for s in starts], ts)
            for (ctx, plen, starts, _, _), ts in zip(episodes, targets, strict=True)
        ]
        return [
            _state_scores(t)
            for t in score_packed(vlm, work, top_k=top_k, episodes_per_forward=episodes_per_forward)
        ]
    states, rows = [], []
    for (ctx, plen, starts, _, _), ts in zip(episodes, targets, strict=True):
        for prefix in state_prefixes(ctx, plen, starts, vlm.image_token_id):
            states += [prefix] * len(ts)
            rows += ts
    scores = iter(score_targets(vlm, states, rows, top_k=top_k, batch_size=batch_size))
    return [
        _state_scores([[next(scores) for _ in ts] for _ in starts])
        for (_, _, starts, _, _), ts in zip(episodes, targets, strict=True)
    ]


def _state_scores(table: Sequence[Sequence[TargetScore]]) -> list[StateScore]:
    """One StateScore per state from its row ``[answer, unit 0, unit 1, ...]``."""
    return [
        StateScore(row[0].mean_logprob, row[0].uncertainty, tuple(c.mean_logprob for c in row[1:]))
        for row in table
    ]
