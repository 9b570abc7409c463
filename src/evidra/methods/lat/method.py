"""LAT: Chain-of-Evidence over synthetic documents, rewarded with LAT Eqs. 2-10.

R = R_acc + R_step + R_ground + R_format. The paper gives no weights and the released code sums
the four unweighted (range -1..4), so every weight is 1 (``method.weights`` changes them).
R_step's similarity is injected (``LatOptions.similarity``, or ``Resources.similarity``):

* ``colqwen2``: ColQwen2 late interaction, as the paper, from ``method.similarity_checkpoint``,
  loaded on first use; tau = 0.3 (§4), calibrated on that score;
* ``text_overlap``: :class:`~evidra.methods.lat.similarity.TextOverlapSimilarity` (offline, page text
  layer inside the box vs the step text), so the recipe runs without a retriever; its scale is not
  ColQwen2's, so its tau is ``TEXT_OVERLAP_TAU``, calibrated on evidra's synthetic documents;
* ``auto`` (the default): ``colqwen2`` when ``method.similarity_checkpoint`` names a retriever,
  else ``text_overlap``.

``method.scoped`` routes the rewards to token scopes for RS-GRPO (``methods/scoped.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from evidra.core.errors import ConfigError
from evidra.core.types import Message, Sample
from evidra.env.single_turn import SingleTurnEnv
from evidra.methods._benchmark import IMAGE_QA, adapter
from evidra.methods._synth import synth_samples
from evidra.methods.lat.batch import episode_scorer, with_step_text
from evidra.methods.lat.construction import lat_filter
from evidra.methods.lat.paradigm import ChainOfEvidence, coe_oracle_text, parse_coe
from evidra.methods.lat.reward import LatReward, LazySimilarity, lat_reward
from evidra.methods.lat.similarity import (
    LAT_TAU,
    TEXT_OVERLAP_TAU,
    StepSimilarity,
    TextOverlapSimilarity,
    require_step_text,
)
from evidra.methods.method import METHODS, Method, Resources, merged_weights
from evidra.methods.scoped import LAT_ROUTES, LAT_RULES, with_scopes
from evidra.rl.run_config import DataConfig
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task


@dataclass(frozen=True)
class LatOptions:
    """The ``method:`` section of a LAT recipe."""

    # the reward rules (rewards.lat_scoring.LAT_RULES): paper, the equations; upstream, the released code
    reward_mode: Literal["paper", "upstream"] = "paper"
    # reward component (accuracy, step, ground, format) -> weight over its default of 1
    weights: Mapping[str, float] = field(default_factory=dict)
    # R_step's similarity of a cropped box and a reasoning step: auto (colqwen2 when
    # similarity_checkpoint names a retriever, else text_overlap), text_overlap (offline, the page's
    # text layer inside the box, its own calibrated tau) or colqwen2 (late interaction, as the paper)
    similarity: Literal["auto", "text_overlap", "colqwen2"] = "auto"
    similarity_checkpoint: str = ""  # the ColQwen2 checkpoint directory (colqwen2, or auto)
    # route the rewards to token scopes (evidence rewards on the reasoning, accuracy on the answer)
    # for algo.advantage=rs_grpo
    scoped: bool = False


def colqwen2_loader(checkpoint: str) -> StepSimilarity:
    """The ColQwen2 similarity of ``checkpoint``, loaded when it first scores a step."""

    def load() -> StepSimilarity:
        from evidra.methods.lat.similarity import ColQwen2Similarity

        return ColQwen2Similarity.load(checkpoint)

    return LazySimilarity(load)


def lat_samples(cfg: DataConfig) -> list[Sample]:
    return synth_samples(cfg, "synth.lat")


def lat_oracle(sample: Sample) -> list[Message]:
    """The prompt plus a correct CoE answer built from the gold boxes (SFT cold start, LAT §3.2)."""
    return [
        *ChainOfEvidence().build_messages(sample, sample.pages),
        Message.text("assistant", coe_oracle_text(sample)),
    ]


def lat_synthetic(text_only: bool) -> Callable[[list[Sample], DataConfig], list[Sample]]:
    """``Task.from_synthetic``: the generated samples a chain of evidence can cite (a gold answer
    box; with the text-overlap similarity, pages with a text layer), e.g. ``data.synthetic=[reading]``."""

    def kept(samples: list[Sample], cfg: DataConfig) -> list[Sample]:
        named = f"data.synthetic={list(cfg.synthetic)}"
        out = [s for s in samples if s.gold_boxes or not s.answerable]
        if not out:
            raise ConfigError(f"{named} gives no sample with a gold answer box; LAT cites boxes: use reading")
        if text_only:
            require_step_text(out, named)
        return out

    return kept


def make_lat_task(name: str, reward: LatReward) -> Task:
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
        from_synthetic=lat_synthetic(text_only),
        # the whole batch's steps in one similarity call (a retriever embeds them together)
        score_episodes=None if text_only else episode_scorer(reward, parse_coe),
    )


def with_similarity(reward: LatReward, similarity: StepSimilarity) -> LatReward:
    """``reward`` scoring R_step with ``similarity`` against that similarity's tau: LAT's 0.3 for
    a retriever's score, ``TEXT_OVERLAP_TAU`` for the word overlap (another scale)."""
    tau = TEXT_OVERLAP_TAU if isinstance(similarity, TextOverlapSimilarity) else LAT_TAU
    return replace(reward, similarity=similarity, config=replace(reward.config, tau=tau))


def _reward(cfg: LatOptions, resources: Resources) -> LatReward:
    reward = lat_reward(cfg.reward_mode)
    reward = replace(reward, weights=merged_weights("lat", reward.weights, cfg.weights))
    if resources.similarity is not None:
        return with_similarity(reward, resources.similarity)
    kind = cfg.similarity
    if kind == "auto":  # the paper's similarity when a retriever is given
        kind = "colqwen2" if cfg.similarity_checkpoint else "text_overlap"
    if kind == "text_overlap":
        if cfg.similarity_checkpoint:
            raise ConfigError(
                "method.similarity_checkpoint is for method.similarity=colqwen2 (or auto); set the "
                "similarity or remove the checkpoint"
            )
        return with_similarity(reward, TextOverlapSimilarity())
    if not cfg.similarity_checkpoint:
        raise ConfigError(
            "method.similarity=colqwen2 needs method.similarity_checkpoint (a ColQwen2 checkpoint "
            "directory), or use method.similarity=text_overlap (offline)"
        )
    return with_similarity(reward, colqwen2_loader(cfg.similarity_checkpoint))


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
    citation=Paper(
        "Look as You Think: Unifying Reasoning and Visual Evidence Attribution for Verifiable Document RAG "
        "via Reinforcement Learning",
        "Liu et al.",
        2026,
        "AAAI",
        "https://arxiv.org/abs/2511.12003",
        "https://github.com/PolarisLiu1/LAT",
    ),
)
METHODS.add("lat", LAT)
