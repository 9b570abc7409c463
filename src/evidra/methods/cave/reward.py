"""CAVE's reward: the task anchors and the process credits of ``evidra.methods.cave.credits``, weighted
by one mapping, as a ``RewardFn`` (anchors only) and over whole episodes with the policy model
(teacher-forced credits from ``evidra.methods.cave.states``). Registers ``cave`` in ``REWARDS``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from evidra.core.types import Parsed, Sample, Trajectory
from evidra.methods.cave.credits import (
    COMPONENTS,
    WEIGHTS,
    CaveParams,
    Outcome,
    StateScore,
    cave_reward,
    evidence_units,
)
from evidra.methods.cave.states import score_states
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import Judge, JudgeItem
from evidra.rewards.reward import REWARDS, RewardResult, check_weights

if TYPE_CHECKING:
    from evidra.models.loading import VLM
    from evidra.rollout import Episode


def _outcome_texts(parsed: Parsed, trajectory: Trajectory | None) -> tuple[str, ...]:
    return tuple(trajectory.texts) if trajectory is not None and trajectory.texts else (parsed.text,)


class CaveReward:
    """CAVE's reward: task anchors (answer correctness from the judge, format validity of every
    turn read by ``parse``) plus process credits, weighted by one mapping over ``COMPONENTS``.

    As a ``RewardFn`` (one response, no policy model) it scores the anchors alone (a one-state
    trajectory has no credits); ``score_episodes`` scores whole episodes with the policy model's
    teacher-forced credits (``evidra.methods.cave.states``). ``parse`` is the zoom agent's turn
    parser (injected: the paradigm sits above the rewards); without one only the given ``Parsed``
    (the final turn) is checked.
    """

    components = COMPONENTS

    def __init__(
        self,
        judge: Judge | None = None,
        weights: Mapping[str, float] | None = None,
        params: CaveParams = CaveParams(),  # noqa: B008 (frozen)
        parse: Callable[[str], Parsed] | None = None,
    ) -> None:
        self.judge = judge if judge is not None else RuleJudge("braced")
        self.weights = check_weights(WEIGHTS if weights is None else weights, COMPONENTS, "cave")
        self.params, self.parse = params, parse

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def reweighted(self, weights: Mapping[str, float]) -> CaveReward:
        merged = {**self.weights, **check_weights(weights, COMPONENTS, "cave")}
        return CaveReward(self.judge, merged, self.params, self.parse)

    def outcome(self, texts: Sequence[str], sample: Sample, last: Parsed | None = None) -> Outcome | None:
        """Task anchors (CAVE §3.3): answer correctness (the judge), format validity of every
        turn, and the round-number anchor (an answer within ``params.max_rounds`` turns); None when
        the judge could not decide (the episode is then unscored, never 0)."""
        parsed = [self.parse(t) for t in texts] if self.parse is not None else [last or Parsed(text="")]
        final = parsed[-1] if parsed else Parsed(text="")
        fmt = float(bool(parsed) and final.answer is not None and all(p.ok for p in parsed))
        rounds = float(final.answer is not None and len(texts) <= self.params.max_rounds)
        if final.answer is None or not sample.answers:
            return Outcome(0.0, fmt, rounds)
        verdict = self.judge.judge([JudgeItem(sample.question, sample.answers[0], final.answer)])[0]
        return None if verdict.value is None else Outcome(float(verdict.value), fmt, rounds)

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        anchors = self.outcome(_outcome_texts(parsed, trajectory), sample, parsed)
        if anchors is None:
            return RewardResult.unscored("judge")
        return cave_reward([StateScore(0.0, 0.0)], [None], anchors, self.params, self.weights)

    def score_episodes(self, vlm: VLM, episodes: Sequence[Episode]) -> list[RewardResult]:
        """Outcome + process credits of each episode; teacher forcing batched over all of them."""
        rows = []
        for ep in episodes:
            traj = ep.trajectory
            starts = [span.start for span in traj.turns] or [0]
            answer = ep.sample.answers[0] if ep.sample.answers else ""
            units = list(evidence_units(ep.sample.gold_evidence.values()))  # a set (§3.2.2)
            rows.append((ep.context, len(traj.prompt_ids), starts, answer, units))
        states = score_states(vlm, rows, top_k=self.params.top_k)
        out = []
        for ep, per in zip(episodes, states, strict=True):
            ratios = [ep.infos[t].area_ratio if t < len(ep.infos) else None for t in range(len(per))]
            anchors = self.outcome(ep.trajectory.texts, ep.sample)
            if anchors is None:
                out.append(RewardResult.unscored("judge"))
            else:
                out.append(cave_reward(per, ratios, anchors, self.params, self.weights))
        return out


REWARDS.add("cave", CaveReward())
