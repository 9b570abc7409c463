"""LAT's four rewards for a whole batch with ONE step-similarity call (LAT Eqs. 2-10).

R_step needs the similarity of every cited crop with its step text (Eq. 8). A retriever such
as ColQwen2 is far cheaper per item when it embeds many crops at once, so the steps of every
episode of a training batch (all groups) go to ``StepSimilarity.score_steps`` together; the
scores are then split back per episode and finished as ``finish_step_reward`` does per episode.
R = sum of the weighted components (the released code: unweighted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from evidra.rewards.base import RewardResult
from evidra.rewards.embedding import StepQuery, StepSimilarity, require_step_text
from evidra.rewards.lat import LatConfig, LatReward, StepPlan, finish_step_reward, plan_steps_paper
from evidra.rewards.lat_parse import StepCitation
from evidra.types import Box, Parsed, Sample


def _query(step: StepCitation, sample: Sample) -> StepQuery | None:
    """The step as a similarity query; None when it cannot be scored (it counts 0)."""
    if step.crop is None or step.box is None or not isinstance(step.page_key, int):
        return None
    return StepQuery(sample.pages[step.page_key], Box(*step.box), step.text)


def _plan(parsed: Parsed, sample: Sample, images: dict[str, list[Any]]) -> StepPlan:
    if sample.id not in images:
        images[sample.id] = [p.open_image() for p in sample.pages]
    pages = images[sample.id]
    return plan_steps_paper(parsed.text, pages, single_image=len(pages) == 1)


def score_lat_batch(
    items: Sequence[tuple[Parsed, Sample]],
    similarity: StepSimilarity,
    config: LatConfig,
    weights: Mapping[str, float],
) -> list[RewardResult]:
    """One ``RewardResult`` per (parsed, sample); one ``score_steps`` call for all their steps."""
    images: dict[str, list[Any]] = {}
    plans = [_plan(parsed, sample, images) for parsed, sample in items]
    queries = [
        q for plan, (_, sample) in zip(plans, items, strict=True) for step in plan.steps
        if (q := _query(step, sample)) is not None
    ]  # fmt: skip
    flat = iter(similarity.score_steps(queries) if queries else [])
    rules = LatReward(components=("accuracy", "ground", "format"), config=config)
    out = []
    for plan, (parsed, sample) in zip(plans, items, strict=True):
        scores = [float(next(flat)) if _query(s, sample) is not None else 0.0 for s in plan.steps]
        (other,) = rules.score_group([parsed], sample)
        gold = sample.answers[0] if sample.answers else ""
        step = finish_step_reward(
            plan, scores, parsed.text, gold, answerable=sample.answerable, config=config
        )
        values = {**other.components, "step": step}
        out.append(
            RewardResult(total=sum(weights.get(k, 0.0) * v for k, v in values.items()), components=values)
        )
    return out


def episode_scorer(
    similarity: Callable[[], StepSimilarity],
    parse: Callable[[str], Parsed],
    config: LatConfig,
    weights: Mapping[str, float],
) -> Callable[[Any, Sequence[Any]], list[RewardResult]]:
    """``Task.score_episodes`` for LAT: the batch's episodes (the final policy turn of each,
    parsed) scored by ``score_lat_batch``; ``similarity`` is called (it may load a model) then."""

    def score(vlm: Any, episodes: Sequence[Any]) -> list[RewardResult]:
        items = [
            (parse(ep.trajectory.texts[-1] if ep.trajectory.texts else ""), ep.sample) for ep in episodes
        ]
        return score_lat_batch(items, similarity(), config, weights)

    return score


Adapt = Callable[[list[Sample], Any], list[Sample]]


def with_step_text(adapt: Adapt) -> Adapt:
    """``Task.from_benchmark`` that refuses pages the text-overlap similarity cannot read
    (``require_step_text``), naming ``data.source``."""

    def checked(samples: list[Sample], cfg: Any) -> list[Sample]:
        kept = adapt(samples, cfg)
        require_step_text(kept, f"data.source={cfg.source}")
        return kept

    return checked
