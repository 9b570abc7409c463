"""Adapters that let other RL frameworks use evidra's rewards.

* ``as_trl_reward``: a reward function for TRL's ``GRPOTrainer(reward_funcs=[...])``;
* ``as_verl_compute_score``: a ``compute_score`` for verl's reward manager.

Both turn the framework's arguments into an evidra ``Sample`` (question, answers, pages and
gold evidence from the dataset columns / ``extra_info``), parse the completion with a paradigm
parser, and call the reward. Unscored results (an unreachable judge, say) become ``None`` for
TRL, which it treats as "no reward" (NaN), and raise nothing.
"""

from __future__ import annotations

from evidra.integrations.frameworks import as_trl_reward, as_verl_compute_score, sample_from_fields

__all__ = ["as_trl_reward", "as_verl_compute_score", "sample_from_fields"]
