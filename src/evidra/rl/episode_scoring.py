"""Scoring a batch of episodes with a task, each final turn parsed once.

The environment already parsed every policy turn (``StepResult.parsed``, kept on the ``Episode``);
when it parsed with the task's own parser, the reward and the guards read that parse instead of
parsing the final turn again (``Episode.final_parsed``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from evidra.core.types import Parsed
from evidra.rewards.reward import RewardResult
from evidra.rl.tasks import Task
from evidra.rollout import Episode

if TYPE_CHECKING:
    from evidra.models.loading import VLM


def score_episodes(
    task: Task, vlm: VLM, episodes: Sequence[Episode], *, guards: bool = False
) -> tuple[list[RewardResult], list[Parsed]]:
    """One reward per episode, and each episode's final turn as the task parses it (empty unless
    the task's own reward or ``guards`` reads it)."""
    needs_final = task.score_episodes is None or guards
    final = [ep.final_parsed(task.parse) for ep in episodes] if needs_final else []
    if task.score_episodes is not None:  # rewards that need the policy or the whole episodes
        return task.score_episodes(vlm, episodes), final
    return [task.score(ep.sample, ep.trajectory, p) for ep, p in zip(episodes, final, strict=True)], final
