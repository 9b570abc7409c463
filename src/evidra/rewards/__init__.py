"""Scoring rules of the five papers, built from shared primitives (text, boxes, ranking, judge).

Importing the package registers every paper's reward in ``REWARDS`` (``lat.*``, ``evisrag.*``,
``vragrl.*``, ``lang2act.*``). Paper behaviour is the default; ``upstream`` modes reproduce
the released code (see docs/rewards.md and docs/rewards_vragrl_lang2act.md).
"""

from evidra.rewards import evisrag, lang2act, lat, vragrl
from evidra.rewards.base import REWARDS, RewardFn, RewardResult
from evidra.rewards.evisrag import EvisragReward
from evidra.rewards.judge import Judge, JudgeItem, OpenAIJudge, RuleJudge, Verdict
from evidra.rewards.lang2act import Lang2ActReward
from evidra.rewards.lat import LatConfig, LatReward, Similarity
from evidra.rewards.vragrl import VragRLReward, VragRLWeights

__all__ = [
    "REWARDS",
    "EvisragReward",
    "Judge",
    "JudgeItem",
    "Lang2ActReward",
    "LatConfig",
    "LatReward",
    "OpenAIJudge",
    "RewardFn",
    "RewardResult",
    "RuleJudge",
    "Similarity",
    "Verdict",
    "VragRLReward",
    "VragRLWeights",
    "evisrag",
    "lang2act",
    "lat",
    "vragrl",
]
