"""The one rollout loop for single- and multi-turn episodes.

It sits below ``eval/``, ``data/`` and ``rl/``, which all use it: evaluation and data construction
roll out a policy the same way training does, without importing the trainer.
"""

from __future__ import annotations

from evidra.rollout.loop import (
    Episode,
    GenerationBackend,
    HFBackend,
    RolloutLimits,
    prefetch_searches,
    rollout,
    same_parser,
)

__all__ = [
    "Episode",
    "GenerationBackend",
    "HFBackend",
    "RolloutLimits",
    "prefetch_searches",
    "rollout",
    "same_parser",
]
