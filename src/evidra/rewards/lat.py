"""LAT (Look As You Think, Chain-of-Evidence) rewards: accuracy, stepwise attribution,
grounding and format (LAT Eqs. 2-10), in ``paper`` and ``upstream`` modes.

Output format: ``<think>step. Bounding box: {"bbox_2d": [x1,y1,x2,y2], "Image_index": k} ...
</think><answer>ans Bounding box: {...}</answer>``; boxes are pixels of the ORIGINAL page.

``upstream`` reproduces ``src/grpo.py`` of PolarisLiu1/LAT (the conformance contract),
including its quirks: an empty prediction scores 0.5 (empty string is a substring of
everything), the 'unkonw' literal, 'not' counting as "no answer", strict in-page bounds, at
least two steps for R_step. ``paper`` follows the equations; see docs/rewards.md for every
difference. The retriever similarity of R_step is an injected ``Similarity`` service.

The rules live in two modules: ``lat_parse`` reads the response (answer, citations, steps and
their crops), ``lat_scoring`` holds the equations. This module is the entry point: it
re-exports both, wraps them as the ``LatReward`` ``RewardFn`` and registers ``lat.*`` in
``REWARDS`` when imported.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.rewards.base import REWARDS, RewardResult

# Re-exports: callers import every rule from this module, wherever it is defined.
from evidra.rewards.lat_parse import _BOX_LABEL as _BOX_LABEL
from evidra.rewards.lat_parse import _BOX_LABELS as _BOX_LABELS
from evidra.rewards.lat_parse import _SENTENCE_SPLIT as _SENTENCE_SPLIT
from evidra.rewards.lat_parse import MAX_CROP_ASPECT as MAX_CROP_ASPECT
from evidra.rewards.lat_parse import StepCitation as StepCitation
from evidra.rewards.lat_parse import StepPlan as StepPlan
from evidra.rewards.lat_parse import _crop_upstream as _crop_upstream
from evidra.rewards.lat_parse import _fit_aspect as _fit_aspect
from evidra.rewards.lat_parse import _pick_page as _pick_page
from evidra.rewards.lat_parse import answer_text as answer_text
from evidra.rewards.lat_parse import cut_box_lists as cut_box_lists
from evidra.rewards.lat_parse import plan_steps_paper as plan_steps_paper
from evidra.rewards.lat_parse import plan_steps_upstream as plan_steps_upstream
from evidra.rewards.lat_parse import strip_answer_boxes as strip_answer_boxes
from evidra.rewards.lat_parse import strip_cited_boxes as strip_cited_boxes
from evidra.rewards.lat_scoring import _FORMAT as _FORMAT
from evidra.rewards.lat_scoring import LatConfig as LatConfig
from evidra.rewards.lat_scoring import Mode as Mode
from evidra.rewards.lat_scoring import Similarity as Similarity
from evidra.rewards.lat_scoring import _acc_upstream as _acc_upstream
from evidra.rewards.lat_scoring import _ground_upstream as _ground_upstream
from evidra.rewards.lat_scoring import _max_same_page_iou as _max_same_page_iou
from evidra.rewards.lat_scoring import accuracy_reward as accuracy_reward
from evidra.rewards.lat_scoring import eval_accuracy as eval_accuracy
from evidra.rewards.lat_scoring import finish_step_reward as finish_step_reward
from evidra.rewards.lat_scoring import format_reward as format_reward
from evidra.rewards.lat_scoring import ground_reward as ground_reward
from evidra.rewards.lat_scoring import score_plans as score_plans
from evidra.rewards.lat_scoring import step_reward as step_reward
from evidra.rewards.lat_scoring import stepwise_attribution as stepwise_attribution
from evidra.types import Page, Parsed, Sample, Trajectory

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

logger = logging.getLogger(__name__)

# ---- RewardFn wrappers -------------------------------------------------------------------------

_COMPONENTS = ("accuracy", "step", "ground", "format")


@dataclass(frozen=True)
class LatReward:
    """LAT reward as a ``RewardFn``: the chosen components and their weighted sum.

    Upstream sums the four rewards unweighted (range -1..4); the paper gives no weights, so the
    default weights are 1. R_step needs a ``Similarity`` service; without one a result that
    includes "step" is returned unscored (never silently 0).
    """

    components: tuple[str, ...] = _COMPONENTS
    weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    mode: Mode = "paper"
    similarity: Similarity | None = None
    config: LatConfig = LatConfig()  # noqa: RUF009 (a frozen dataclass, so a shared default is safe)

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_group([parsed], sample)[0]

    @property
    def component_names(self) -> tuple[str, ...]:
        return self.components

    def missing_service(self) -> str | None:
        """Why this reward cannot score anything as configured, or None."""
        if "step" in self.components and self.similarity is None:
            return "LAT's R_step needs a Similarity service: LatReward(similarity=TextOverlapSimilarity())"
        return None

    def score_group(self, group: Sequence[Parsed], sample: Sample) -> list[RewardResult]:
        """Score a group of responses to one sample, with one similarity call for all steps."""
        if "step" in self.components and self.similarity is None:
            return [RewardResult.unscored("lat.step needs a Similarity service") for _ in group]
        gold = sample.answers[0] if sample.answers else ""
        gold_box, gold_page = _gold_of(sample)
        step_scores: list[float] = []
        if "step" in self.components and self.similarity is not None:
            pages = [_open(p) for p in sample.pages]
            single = len(pages) == 1
            planner = plan_steps_upstream if self.mode == "upstream" else plan_steps_paper
            plans = [planner(p.text, pages, single_image=single) for p in group]
            all_scores = score_plans(plans, self.similarity)
            step_scores = [
                finish_step_reward(
                    plan, s, p.text, gold, answerable=sample.answerable, mode=self.mode, config=self.config
                )
                for plan, s, p in zip(plans, all_scores, group, strict=True)
            ]
        results = []
        for i, p in enumerate(group):
            values: dict[str, float] = {}
            for name in self.components:
                if name == "accuracy":
                    values[name] = accuracy_reward(p.text, gold, answerable=sample.answerable, mode=self.mode)
                elif name == "ground":
                    values[name] = ground_reward(
                        p.text, gold_box, gold_page, mode=self.mode, config=self.config
                    )
                elif name == "format":
                    values[name] = format_reward(p.text)
                elif name == "step":
                    values[name] = step_scores[i]
            weight = dict(zip(_COMPONENTS, self.weights, strict=True))
            total = sum(weight[k] * v for k, v in values.items())
            results.append(RewardResult(total=total, components=values))
        return results


def _gold_of(sample: Sample) -> tuple[tuple[float, float, float, float] | None, int | None]:
    """The gold answer box and its 0-based page; page None marks an unanswerable item."""
    if not sample.answerable:
        return None, None
    if not sample.gold_boxes:  # answerable, but the benchmark has no box: R_ground cannot be earned
        return None, 0  # (and a "No answer" must not earn the unanswerable branch's reward)
    gold = sample.gold_boxes[0]
    index = sample.page_index(gold.page_id) if sample.pages else 0
    return gold.box.as_tuple(), index


def _open(page: Page) -> PILImage | None:
    try:
        return page.open_image()
    except OSError:
        logger.warning("page image %s could not be opened; its steps score 0", page.image_path)
        return None


for _name in _COMPONENTS:
    REWARDS.add(f"lat.{_name}", LatReward(components=(_name,)))
REWARDS.add("lat", LatReward())
REWARDS.add("lat.upstream", LatReward(mode="upstream"))
