"""LAT: Chain-of-Evidence over synthetic documents, rewarded with LAT Eqs. 2-10.

R = R_acc + R_step + R_ground + R_format. The paper gives no weights and the released code sums
the four unweighted (range -1..4), so every weight is 1 (``method.weights`` changes them).
R_step's similarity is injected (``LatOptions.similarity``, or ``Resources.similarity``):

* ``text_overlap``: :class:`~evidra.rewards.embedding.TextOverlapSimilarity` (offline, page text
  layer inside the box vs the step text), so the recipe runs without a retriever;
* ``colqwen2``: ColQwen2 late interaction, as the paper, from ``method.similarity_checkpoint``,
  loaded on first use.

``method.scoped`` routes the rewards to token scopes for RS-GRPO (``methods/combined.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evidra.data.construction.distill import lat_filter
from evidra.env.single_turn import SingleTurnEnv
from evidra.errors import ConfigError
from evidra.methods._benchmark import IMAGE_QA, adapter
from evidra.methods._synth import synth_samples
from evidra.methods.base import METHODS, Method, Resources, merged_weights
from evidra.methods.combined import LAT_ROUTES, LAT_RULES, with_scopes
from evidra.paradigms.coe import ChainOfEvidence, coe_oracle_text, parse_coe
from evidra.rewards.base import RewardResult
from evidra.rewards.embedding import StepSimilarity, TextOverlapSimilarity
from evidra.rewards.lat import LatConfig
from evidra.rewards.lat_batch import episode_scorer, score_lat_batch, with_step_text
from evidra.rewards.lat_scoring import Mode
from evidra.rl.config import DataConfig
from evidra.rl.tasks import Task
from evidra.types import Message, Parsed, Sample, Trajectory

WEIGHTS = {"accuracy": 1.0, "step": 1.0, "ground": 1.0, "format": 1.0}  # released: unweighted sum


@dataclass(frozen=True)
class LatOptions:
    """The ``method:`` section of a LAT recipe."""

    # paper: the reward as the paper writes it; upstream: as the released code computes it
    reward_mode: Mode = "paper"
    # reward component (accuracy, step, ground, format) -> weight over its default of 1
    weights: Mapping[str, float] = field(default_factory=dict)
    # R_step's similarity of a cropped box and a reasoning step: text_overlap (offline, the page's
    # text layer inside the box) or colqwen2 (late interaction, as the paper)
    similarity: Literal["text_overlap", "colqwen2"] = "text_overlap"
    similarity_checkpoint: str = ""  # with similarity=colqwen2: the ColQwen2 checkpoint directory
    # route the rewards to token scopes (evidence rewards on the reasoning, accuracy on the answer)
    # for algo.advantage=rs_grpo
    scoped: bool = False


@dataclass
class LatTaskReward:
    """LAT's four rewards with R_step scored by a ``StepSimilarity`` over (page, box, text)."""

    similarity: StepSimilarity | None = None
    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))
    config: LatConfig = field(default_factory=LatConfig)
    loader: Any = None  # () -> StepSimilarity, called once when ``similarity`` is None
    mode: Mode = "paper"  # upstream: the released reward's parsing and scoring rules

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_group([parsed], sample)[0]

    def _similarity(self) -> StepSimilarity:
        if self.similarity is None:
            if self.loader is None:
                raise ConfigError("LatTaskReward needs a similarity or a loader")
            self.similarity = self.loader()
        assert self.similarity is not None
        return self.similarity

    def score_group(self, group: Sequence[Parsed], sample: Sample) -> list[RewardResult]:
        """One similarity call for every step of the group (LAT Eq. 8)."""
        items = [(p, sample) for p in group]
        return score_lat_batch(items, self._similarity(), self.config, self.weights, self.mode)


def colqwen2_loader(checkpoint: str) -> Any:
    """() -> the ColQwen2 similarity of ``checkpoint``, loaded when first called."""

    def load() -> StepSimilarity:
        from evidra.rewards.embedding import ColQwen2Similarity

        return ColQwen2Similarity.load(checkpoint)

    return load


def lat_samples(cfg: DataConfig) -> list[Sample]:
    return synth_samples(cfg, "synth.lat")


def lat_oracle(sample: Sample) -> list[Message]:
    """The prompt plus a correct CoE answer built from the gold boxes (SFT cold start, LAT §3.2)."""
    return [
        *ChainOfEvidence().build_messages(sample, sample.pages),
        Message.text("assistant", coe_oracle_text(sample)),
    ]


def make_lat_task(name: str, reward: LatTaskReward) -> Task:
    text_only = isinstance(reward.similarity, TextOverlapSimilarity)
    benchmark = adapter(IMAGE_QA, name=name)
    return Task(
        name=name,
        samples=lat_samples,
        make_env=lambda s: SingleTurnEnv(ChainOfEvidence()),
        parse=parse_coe,
        reward=reward,
        oracle=lat_oracle,
        from_benchmark=with_step_text(benchmark) if text_only else benchmark,
        # the whole batch's steps in one similarity call (a retriever embeds them together)
        score_episodes=None
        if text_only
        else episode_scorer(reward._similarity, parse_coe, reward.config, reward.weights, reward.mode),
    )


def _reward(cfg: LatOptions, resources: Resources) -> LatTaskReward:
    weights, mode = merged_weights("lat", WEIGHTS, cfg.weights), cfg.reward_mode
    if resources.similarity is not None:
        return LatTaskReward(similarity=resources.similarity, weights=weights, mode=mode)
    if cfg.similarity == "text_overlap":
        if cfg.similarity_checkpoint:
            raise ConfigError(
                "method.similarity_checkpoint is for method.similarity=colqwen2; set the similarity "
                "or remove the checkpoint"
            )
        return LatTaskReward(similarity=TextOverlapSimilarity(), weights=weights, mode=mode)
    if not cfg.similarity_checkpoint:
        raise ConfigError(
            "method.similarity=colqwen2 needs method.similarity_checkpoint (a ColQwen2 checkpoint "
            "directory), or use method.similarity=text_overlap (offline)"
        )
    return LatTaskReward(loader=colqwen2_loader(cfg.similarity_checkpoint), weights=weights, mode=mode)


def build_lat(cfg: LatOptions, resources: Resources) -> Task:
    """LAT's task: the chain-of-evidence paradigm and its four rewards (optionally scoped)."""
    task = make_lat_task("lat", _reward(cfg, resources))
    return with_scopes(task, "lat.rs_grpo", LAT_RULES, LAT_ROUTES) if cfg.scoped else task


LAT = Method(
    name="lat",
    options=LatOptions,
    build=build_lat,
    paradigm="coe",
    summary="LAT: chain of evidence, every step cites a page and a box",
    layout="lat",
    distill=lat_filter,
    stages=("distill", "filter"),
)
METHODS.add("lat", LAT)
