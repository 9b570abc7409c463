"""Adapters that let other RL frameworks use evidra's rewards.

* ``method_reward(name, **options)``: the reward and parser a registered method trains with, for
  the adapters below (``as_trl_reward(*method_reward("lat"))``);
* ``as_trl_reward``: a reward function for TRL's ``GRPOTrainer(reward_funcs=[...])``;
* ``as_verl_compute_score``: a ``compute_score`` for verl's reward manager;
* ``as_trl_environment``: an evidra environment as TRL's multi-turn ``environment_factory``,
  its actions exposed as tools (``SEARCH_TOOL``, ``BBOX_TOOL``, ``ZOOM_TOOL`` or a
  ``ToolSpec``); ``as_trl_reward`` then scores each rollout's episode;
* ``evidra.integrations.verl_tools`` (imported on its own, it imports verl when present): the
  search, crop and zoom environments as tools of verl's multi-turn tool agent loop.

Both turn the framework's arguments into an evidra ``Sample`` (question, answers, pages and
gold evidence from the dataset columns / ``extra_info``), parse the completion with a paradigm
parser, and call the reward. Unscored results (an unreachable judge, say) become ``None`` for
TRL, which it treats as "no reward" (NaN), and raise nothing.
"""

from __future__ import annotations

from evidra.integrations.frameworks import (
    as_trl_reward,
    as_verl_compute_score,
    method_reward,
)
from evidra.integrations.samples import sample_from_fields
from evidra.integrations.trl_env import (
    BBOX_TOOL,
    SEARCH_TOOL,
    ZOOM_TOOL,
    Episode,
    ToolSpec,
    TRLEnvironment,
    as_trl_environment,
)

__all__ = [
    "BBOX_TOOL",
    "SEARCH_TOOL",
    "ZOOM_TOOL",
    "Episode",
    "TRLEnvironment",
    "ToolSpec",
    "as_trl_environment",
    "as_trl_reward",
    "as_verl_compute_score",
    "method_reward",
    "sample_from_fields",
]
