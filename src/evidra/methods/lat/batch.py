"""LAT's reward over a training batch: the ``Task`` hooks of the LAT recipe.

``episode_scorer`` scores the final policy turn of every episode of a batch with
``LatReward.score_batch`` (one step-similarity call for all of them); ``with_step_text`` refuses
benchmark pages the offline text-overlap similarity cannot read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from evidra.core.types import Parsed, Sample
from evidra.methods.lat.reward import LatReward
from evidra.methods.lat.similarity import require_step_text
from evidra.rewards.reward import RewardResult

if TYPE_CHECKING:
    from evidra.models.loading import VLM
    from evidra.rl.run_config import DataConfig
    from evidra.rollout import Episode


def episode_scorer(
    reward: LatReward, parse: Callable[[str], Parsed]
) -> Callable[[VLM, Sequence[Episode]], list[RewardResult]]:
    """``Task.score_episodes`` for LAT: the batch's episodes (the final policy turn of each,
    parsed) scored by ``reward.score_batch``."""

    def score(vlm: VLM, episodes: Sequence[Episode]) -> list[RewardResult]:
        items = [
            (parse(ep.trajectory.texts[-1] if ep.trajectory.texts else ""), ep.sample) for ep in episodes
        ]
        return reward.score_batch(items)

    return score


Adapt = Callable[[list[Sample], "DataConfig"], list[Sample]]


def with_step_text(adapt: Adapt) -> Adapt:
    """``Task.from_benchmark`` that refuses pages the text-overlap similarity cannot read
    (``require_step_text``), naming ``data.source``."""

    def checked(samples: list[Sample], cfg: DataConfig) -> list[Sample]:
        kept = adapt(samples, cfg)
        require_step_text(kept, f"data.source={cfg.source}")
        return kept

    return checked
