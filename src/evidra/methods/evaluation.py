"""A method's training reward as an evaluation scorer: the reward that trains is the one that
evaluates (``evidra eval --method NAME``).

``reward_scorer(task)`` scores a finished evaluation episode with ``task.reward``, the very
object a trainer of that task calls: the final policy turn parsed by the task's parser, the pages
the environment retrieved (VRAG-RL's NDCG reads them) and every policy turn's text (a
trajectory without token ids: what a text-level reward reads). The result lands in the
prediction's scores as ``reward`` and ``reward/<component>``, the names training logs in
``metrics.jsonl``; an episode the reward could not score (a judge that failed) counts in
``reward/unscored``. Rewards that need the policy's log-probs (CAVE's teacher-forced process
credits, ``Task.score_episodes``) are not recomputed here: the outcome part of its reward is. A
task whose reward reads the environment's step infos (``Task.score_steps``) is scored with them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from evidra.core.types import Sample, Span, Trajectory
from evidra.eval.sample_scoring import Prediction
from evidra.rl.tasks import Task

Scorer = Callable[[Sample, Prediction], dict[str, float]]


def text_trajectory(texts: tuple[str, ...]) -> Trajectory:
    """The policy turns of an episode as a trajectory without tokens (texts only)."""
    return Trajectory((), (), (), (), tuple(Span(0, 0) for _ in texts), texts)


def reward_scorer(task: Task) -> Scorer:
    """Per-sample scores of ``task.reward`` on an evaluation episode (see the module docstring)."""

    def scored(sample: Sample, pred: Prediction) -> dict[str, float]:
        parsed = task.parse(pred.texts[-1] if pred.texts else "")
        retrieved = pred.infos[-1].retrieved if pred.infos else ()
        if retrieved:
            parsed = dataclasses.replace(parsed, retrieved=retrieved)
        trajectory = text_trajectory(pred.texts)
        if task.score_steps is not None:  # a reward that reads what the environment did
            result = task.score_steps(parsed, sample, trajectory, pred.infos)
        else:
            result = task.reward(parsed, sample, trajectory)
        if not result.scored:
            return {"reward/unscored": 1.0}
        return {"reward": result.total, **{f"reward/{k}": v for k, v in result.components.items()}}

    return scored
