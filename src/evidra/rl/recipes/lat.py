"""LAT task: Chain-of-Evidence over synthetic documents, rewarded with LAT Eqs. 2-10.

R = R_acc + R_step + R_ground + R_format. The paper gives no weights and the released code sums
the four unweighted (range -1..4), so every weight is 1. R_step's similarity is injected:

* ``lat``: :class:`~evidra.rewards.embedding.TextOverlapSimilarity` (offline, page text layer
  inside the box vs the step text), so the recipe runs without a retriever;
* ``lat.colqwen2``: ColQwen2 late interaction, as the paper; the checkpoint directory is read
  from the ``EVIDRA_LAT_RETRIEVER`` environment variable (``RLConfig`` has no field for a
  reward model yet) and loaded on first use.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evidra.env.single_turn import SingleTurnEnv
from evidra.errors import ConfigError
from evidra.paradigms.coe import ChainOfEvidence, coe_oracle_text, parse_coe
from evidra.rewards.base import RewardResult
from evidra.rewards.embedding import StepSimilarity, TextOverlapSimilarity
from evidra.rewards.lat import LatConfig
from evidra.rewards.lat_batch import episode_scorer, score_lat_batch, with_step_text
from evidra.rl.config import DataConfig
from evidra.rl.recipes._benchmark import IMAGE_QA, adapter
from evidra.rl.recipes._synth import synth_samples
from evidra.rl.recipes.combined import LAT_ROUTES, LAT_RULES, with_scopes
from evidra.rl.tasks import TASKS, Task
from evidra.types import Message, Parsed, Sample, Trajectory

RETRIEVER_ENV = "EVIDRA_LAT_RETRIEVER"
WEIGHTS = {"accuracy": 1.0, "step": 1.0, "ground": 1.0, "format": 1.0}  # released: unweighted sum


@dataclass
class LatTaskReward:
    """LAT's four rewards with R_step scored by a ``StepSimilarity`` over (page, box, text)."""

    similarity: StepSimilarity | None = None
    weights: dict[str, float] = field(default_factory=lambda: dict(WEIGHTS))
    config: LatConfig = field(default_factory=LatConfig)
    loader: Any = None  # () -> StepSimilarity, called once when ``similarity`` is None

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
        return score_lat_batch([(p, sample) for p in group], self._similarity(), self.config, self.weights)


def _colqwen2_loader() -> StepSimilarity:
    from evidra.rewards.embedding import ColQwen2Similarity

    path = os.environ.get(RETRIEVER_ENV)
    if not path:
        raise ConfigError(
            f"task lat.colqwen2 reads the ColQwen2 checkpoint directory from ${RETRIEVER_ENV}; set it, "
            "or use task lat (offline text-overlap similarity)"
        )
    return ColQwen2Similarity.load(path)


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
    return Task(
        name=name,
        samples=lat_samples,
        make_env=lambda s: SingleTurnEnv(ChainOfEvidence()),
        parse=parse_coe,
        reward=reward,
        oracle=lat_oracle,
        from_benchmark=with_step_text(adapter(IMAGE_QA)) if text_only else adapter(IMAGE_QA),
        # the whole batch's steps in one similarity call (a retriever embeds them together)
        score_episodes=None
        if text_only
        else episode_scorer(reward._similarity, parse_coe, reward.config, reward.weights),
    )


LAT_TASK = make_lat_task("lat", LatTaskReward(similarity=TextOverlapSimilarity()))
TASKS.add("lat", LAT_TASK)
TASKS.add("lat.colqwen2", make_lat_task("lat.colqwen2", LatTaskReward(loader=_colqwen2_loader)))
# LAT's evidence rewards on the chain of evidence, accuracy on the answer (recipes/combined.py)
TASKS.add("lat.rs_grpo", with_scopes(LAT_TASK, "lat.rs_grpo", LAT_RULES, LAT_ROUTES))
