"""CAVE's structured process credits as pure functions (CAVE §3.2-3.3, App. D.1).

For a trajectory of T policy turns, ``s_t`` (t = 0..T-1) is the context state before turn t:
the prompt, earlier turns and their observations. A teacher-forcing pass
(``evidra.methods.cave.states``) gives, per state, the mean log-likelihood of the gold answer
body, the mean log-likelihood of each textual evidence unit, and the normalised top-k entropy
of the answer tokens. Turn t (t < T-1) is credited with the change it and its observation
caused, from ``s_t`` to ``s_{t+1}``:

* belief update (§3.2.1): ``b_t = V(s_{t+1}) - V(s_t)``, V the answer-body log-likelihood;
* evidence acquisition (§3.2.2): ``e_t = mean_k max(0, E_k(s_{t+1}) - E_k(s_t))``;
* adaptive focus (§3.2.3): for a valid zoom with area ratio ``rho_t``, target scale
  ``rho*_t = rho_min + u_t (rho_max - rho_min)`` from the normalised uncertainty ``u_t`` of
  ``s_t``; ``f_t = 1[b_t > 0 or e_t > 0] * max(0, 1 - |rho_t - rho*_t| / (rho_max - rho_min))``.

Each credit is bounded (``psi``: clip to ``[-c, c]``) and weighted by the round decay
``gamma**t`` (§3.3); the process reward is ``w_b C_b + w_e C_e + w_f C_f`` (App. D.1). The
last turn carries the task-anchoring outcome terms (§3.3: "answer correctness, format validity,
and round-number constraints"): accuracy, format, and ``rounds``, 1 when the episode answered
within ``max_rounds`` rounds (App. D.1 bounds them), 0 when it ran out of rounds. Per-turn
values are returned in ``RewardResult.turns`` and sum to the total, so the trainer's
``turn_credit`` advantage (trajectory normalisation) sees the same scalar as plain GRPO.

The seed's formulas and numbers were lost in extraction (top-k, scale range, decay, clip,
weights, round limit); the defaults below are ours, chosen to match the text's constraints
("slightly higher weight to belief update"), and are listed in docs/agents.md.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.rewards.reward import RewardResult, weighted_sum

COMPONENTS = ("belief", "evidence", "focus", "accuracy", "format", "rounds")
# process credits (slightly higher weight to belief update) and the task-anchoring terms (CAVE §3.3, App. D.1)
WEIGHTS: Mapping[str, float] = {
    "belief": 0.4,
    "evidence": 0.3,
    "focus": 0.3,
    "accuracy": 1.0,
    "format": 0.1,
    "rounds": 0.1,
}


@dataclass(frozen=True)
class CaveParams:
    """The credits' constants (the weights are the reward's own mapping)."""

    top_k: int = 10  # entropy top-k
    rho_min: float = 0.05  # crop-scale range (area ratio)
    rho_max: float = 0.5
    gamma: float = 0.9  # round decay
    clip: float = 1.0  # psi bound
    max_rounds: int = 4  # rounds per rollout (the round-number anchor's bound and the environment's)

    def __post_init__(self) -> None:
        if (
            self.top_k < 2
            or self.max_rounds < 1
            or not 0 <= self.rho_min < self.rho_max <= 1
            or not 0 < self.gamma <= 1
            or self.clip <= 0
        ):
            raise InvalidInputError(
                "CAVE params need top_k >= 2, max_rounds >= 1, 0 <= rho_min < rho_max <= 1, 0 < gamma <= 1, "
                "clip > 0; "
                f"got {self}"
            )


@dataclass(frozen=True)
class StateScore:
    """Teacher-forcing results of one state ``s_t``."""

    answer: float  # mean log-likelihood of the answer-body tokens
    uncertainty: float  # top-k entropy of the answer tokens / log k, in [0, 1]
    evidence: tuple[float, ...] = ()  # mean log-likelihood of each evidence unit


def belief_gains(states: Sequence[StateScore]) -> list[float]:
    """CAVE §3.2.1: adjacent-state gains of the answer log-likelihood (len(states) - 1 values).

    >>> belief_gains([StateScore(-3.0, 0.5), StateScore(-2.0, 0.4), StateScore(-2.5, 0.4)])
    [1.0, -0.5]
    """
    return [b.answer - a.answer for a, b in itertools.pairwise(states)]


def evidence_units(texts: Iterable[str]) -> tuple[str, ...]:
    """CAVE §3.2.2's evidence units, "a set of textualized visual evidence units": each distinct
    non-empty text once (whitespace collapsed), in first-seen order, so a unit stated on two pages
    weighs as much in the mean gain as any other.

    >>> evidence_units(["A red gear.", "", "A red  gear. ", "A blue pipe."])
    ('A red gear.', 'A blue pipe.')
    """
    units = (" ".join(text.split()) for text in texts)
    return tuple(dict.fromkeys(unit for unit in units if unit))


def evidence_gains(states: Sequence[StateScore]) -> list[float]:
    """CAVE §3.2.2: mean over evidence units of the positive part of each unit's gain.

    >>> evidence_gains([StateScore(0, 0, (-4.0, -2.0)), StateScore(0, 0, (-3.0, -2.5))])
    [0.5]
    """
    out = []
    for a, b in itertools.pairwise(states):
        gains = [max(0.0, y - x) for x, y in zip(a.evidence, b.evidence, strict=True)]
        out.append(sum(gains) / len(gains) if gains else 0.0)
    return out


def target_scale(uncertainty: float, params: CaveParams) -> float:
    """Uncertainty-aware target area ratio: wider views when the state is uncertain (§3.2.3)."""
    u = min(1.0, max(0.0, uncertainty))
    return params.rho_min + u * (params.rho_max - params.rho_min)


def focus_credit(
    area_ratio: float | None, uncertainty: float, belief: float, evidence: float, params: CaveParams
) -> float:
    """CAVE §3.2.3: scale match of a valid zoom, gated by positive belief or evidence progress.

    >>> round(focus_credit(0.2, 0.5, 0.1, 0.0, CaveParams()), 6)  # target 0.275, |0.2-0.275|/0.45
    0.833333
    >>> focus_credit(0.2, 0.5, -0.1, 0.0, CaveParams())
    0.0
    """
    if area_ratio is None or not (belief > 0 or evidence > 0):
        return 0.0
    span = params.rho_max - params.rho_min
    return max(0.0, 1.0 - abs(area_ratio - target_scale(uncertainty, params)) / span)


def bounded(value: float, clip: float) -> float:
    """psi of CAVE §3.3: clip a local credit to ``[-clip, clip]`` (non-finite -> 0)."""
    return 0.0 if not math.isfinite(value) else max(-clip, min(clip, value))


@dataclass(frozen=True)
class Outcome:
    accuracy: float  # 0/1 answer correctness
    format: float  # 0/1 format validity
    rounds: float = 1.0  # 0/1: answered within the round limit (the round-number anchor)


def cave_reward(
    states: Sequence[StateScore],
    area_ratios: Sequence[float | None],
    outcome: Outcome,
    params: CaveParams = CaveParams(),
    weights: Mapping[str, float] = WEIGHTS,
) -> RewardResult:
    """Per-turn credits and their total for one trajectory of ``len(states)`` turns.

    ``area_ratios[t]`` is the area ratio of turn t's valid zoom, None when turn t did not zoom.
    Turn t < T-1 gets ``gamma**t (w_b psi(b_t) + w_e psi(e_t) + w_f psi(f_t))``; the last turn
    also gets ``w_acc * accuracy + w_fmt * format + w_rounds * rounds``. The total is the weighted
    sum of the decayed
    credit sums and the anchors (what the turns add up to); ``process`` logs the credits' part.
    """
    if not states:
        raise InvalidInputError("cave_reward needs the state score of at least one turn")
    if len(area_ratios) != len(states):
        raise InvalidInputError(f"{len(states)} states but {len(area_ratios)} area ratios")
    c = params.clip
    beliefs, evidences = belief_gains(states), evidence_gains(states)
    turns: list[float] = []
    sums = {"belief": 0.0, "evidence": 0.0, "focus": 0.0}
    for t, (b, e) in enumerate(zip(beliefs, evidences, strict=True)):
        f = focus_credit(area_ratios[t], states[t].uncertainty, b, e, params)
        decay = params.gamma**t
        local = {
            "belief": decay * bounded(b, c),
            "evidence": decay * bounded(e, c),
            "focus": decay * bounded(f, c),
        }
        for name, value in local.items():
            sums[name] += value
        turns.append(weighted_sum(local, weights))
    anchors = {"accuracy": outcome.accuracy, "format": outcome.format, "rounds": outcome.rounds}
    turns.append(weighted_sum(anchors, weights))
    values = {**sums, **anchors}
    result = RewardResult.weighted(values, weights, turns=tuple(turns))
    process = weighted_sum(sums, weights)
    return RewardResult(result.total, {**values, "process": process}, turns=result.turns)
