"""LAT (Look As You Think, Chain-of-Evidence) rewards: accuracy, stepwise attribution,
grounding and format (LAT Eqs. 2-10), as the paper writes them and as the released code computes them.

Output format: ``<think>step. Bounding box: {"bbox_2d": [x1,y1,x2,y2], "Image_index": k} ...
</think><answer>ans Bounding box: {...}</answer>``; boxes are pixels of the ORIGINAL page.

The released variant (``lat.upstream``; rules ``LAT_RULES["upstream"]``) reproduces
``src/grpo.py`` of PolarisLiu1/LAT (the conformance contract), including its quirks: an empty
prediction scores 0.5 (empty string is a substring of everything), the 'unkonw' literal, 'not'
counting as "no answer", strict in-page bounds, at least two steps for R_step. The paper variant
(``lat``) follows the equations; see docs/rewards.md for every difference.

R_step needs the similarity of every cited crop with its step text (Eq. 8), from an injected
``StepSimilarity`` service (``evidra.methods.lat.similarity``). A retriever such as ColQwen2 is far
cheaper per item when it embeds many crops at once, so ``LatReward.score_batch`` sends the
steps of every response of a batch (all groups) in ONE ``score_steps`` call. The rules live in
``lat_parse`` (reading the response) and ``lat_scoring`` (the equations); this module is the
reward and registers ``lat.*`` in ``REWARDS`` when imported.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

from evidra.core.types import Box, Page, Parsed, Sample, Trajectory
from evidra.methods.lat.parse import StepCitation, StepPlan
from evidra.methods.lat.rules import LAT_RULES, PAPER, UPSTREAM, LatConfig, LatRules, format_reward
from evidra.methods.lat.similarity import StepQuery, StepSimilarity
from evidra.rewards.reward import REWARDS, RewardResult, check_weights

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

logger = logging.getLogger(__name__)

COMPONENTS = ("accuracy", "step", "ground", "format")
WEIGHTS: Mapping[str, float] = dict.fromkeys(COMPONENTS, 1.0)  # released: the unweighted sum (-1..4)


class LazySimilarity:
    """A ``StepSimilarity`` that builds its model on the first call (``load``), once, so that
    building a reward (and checking a config) never loads a retriever."""

    def __init__(self, load: Callable[[], StepSimilarity]) -> None:
        self._load = load
        self._loaded: StepSimilarity | None = None
        self._lock = threading.Lock()

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        with self._lock:
            if self._loaded is None:
                self._loaded = self._load()
            loaded = self._loaded
        return loaded.score_steps(queries)


@dataclass(frozen=True)
class LatReward:
    """LAT's reward: the components named in ``weights``, and their weighted sum.

    The paper gives no weights and the released code sums the four unweighted, so every default
    weight is 1. R_step needs a ``similarity``; without one a reward that includes "step" is
    returned unscored (never silently 0).
    """

    rules: LatRules = PAPER
    weights: Mapping[str, float] = field(default_factory=lambda: dict(WEIGHTS))
    similarity: StepSimilarity | None = None
    config: LatConfig = LatConfig()  # noqa: RUF009 (a frozen dataclass, so a shared default is safe)
    components: ClassVar[tuple[str, ...]] = COMPONENTS

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", check_weights(self.weights, COMPONENTS, "lat"))

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_batch([(parsed, sample)])[0]

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def reweighted(self, weights: Mapping[str, float]) -> LatReward:
        return replace(self, weights={**self.weights, **check_weights(weights, COMPONENTS, "lat")})

    def missing_service(self) -> str | None:
        """Why this reward cannot score anything as configured, or None."""
        if "step" in self.weights and self.similarity is None:
            return (
                "LAT's R_step needs a StepSimilarity service: LatReward(similarity=TextOverlapSimilarity())"
            )
        return None

    def score_group(self, group: Sequence[Parsed], sample: Sample) -> list[RewardResult]:
        """A group of responses to one sample (one similarity call for all their steps)."""
        return self.score_batch([(p, sample) for p in group])

    def score_batch(self, items: Sequence[tuple[Parsed, Sample]]) -> list[RewardResult]:
        """One result per (parsed, sample); ONE ``score_steps`` call for all their steps."""
        if "step" in self.weights and self.similarity is None:
            return [RewardResult.unscored("lat.step needs a StepSimilarity service") for _ in items]
        steps = self._step_scores(items) if "step" in self.weights else [0.0] * len(items)
        return [
            RewardResult.weighted(self._values(parsed, sample, step), self.weights)
            for (parsed, sample), step in zip(items, steps, strict=True)
        ]

    def _values(self, parsed: Parsed, sample: Sample, step: float) -> dict[str, float]:
        gold = sample.answers[0] if sample.answers else ""
        gold_box, gold_page = _gold_of(sample)
        rules, text = self.rules, parsed.text
        every: dict[str, Callable[[], float]] = {
            "accuracy": lambda: rules.accuracy(text, gold, answerable=sample.answerable),
            "step": lambda: step,
            "ground": lambda: rules.ground(text, gold_box, gold_page, self.config),
            "format": lambda: format_reward(text),
        }
        return {name: every[name]() for name in self.weights}

    def _step_scores(self, items: Sequence[tuple[Parsed, Sample]]) -> list[float]:
        assert self.similarity is not None
        images: dict[str, list[PILImage | None]] = {}
        plans = [self._plan(parsed, sample, images) for parsed, sample in items]
        queries = [
            [_query(step, sample) for step in plan.steps]
            for plan, (_, sample) in zip(plans, items, strict=True)
        ]
        asked = [q for per in queries for q in per if q is not None]
        flat = iter(self.similarity.score_steps(asked) if asked else [])
        out = []
        for plan, per, (parsed, sample) in zip(plans, queries, items, strict=True):
            scores = [float(next(flat)) if q is not None else 0.0 for q in per]
            gold = sample.answers[0] if sample.answers else ""
            out.append(
                self.rules.step(
                    plan, scores, parsed.text, gold, answerable=sample.answerable, config=self.config
                )
            )
        return out

    def _plan(self, parsed: Parsed, sample: Sample, images: dict[str, list[PILImage | None]]) -> StepPlan:
        if sample.id not in images:
            images[sample.id] = [_open(p) for p in sample.pages]
        pages = images[sample.id]
        return self.rules.plan(parsed.text, pages, single_image=len(pages) == 1)


def _query(step: StepCitation, sample: Sample) -> StepQuery | None:
    """The step as a similarity query; None when it cannot be scored (it counts 0)."""
    if step.crop is None or step.box is None or step.page is None:
        return None
    return StepQuery(sample.pages[step.page], Box(*step.box), step.text)


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


def lat_reward(
    variant: str = "paper",
    *,
    weights: Mapping[str, float] | None = None,
    similarity: StepSimilarity | None = None,
    config: LatConfig | None = None,
) -> LatReward:
    """The LAT reward of a registered variant (``LAT_RULES``: paper | upstream); the options are
    ``LatReward``'s (None: its default)."""
    return LatReward(
        rules=LAT_RULES.get(variant),
        weights=dict(WEIGHTS) if weights is None else weights,
        similarity=similarity,
        config=LatConfig() if config is None else config,
    )


REWARDS.add("lat", LatReward())
REWARDS.add("lat.upstream", LatReward(rules=UPSTREAM))
for _name in COMPONENTS:
    REWARDS.add(f"lat.{_name}", LatReward(weights={_name: 1.0}))
    if _name != "format":  # R_format is the same in both
        REWARDS.add(f"lat.{_name}.upstream", LatReward(rules=UPSTREAM, weights={_name: 1.0}))
