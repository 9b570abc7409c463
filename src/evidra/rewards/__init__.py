"""Scoring rules of the five papers, built from shared primitives (text, boxes, ranking, judge).

Importing the package registers every paper's reward in ``REWARDS`` (``lat.*``, ``evisrag.*``,
``vragrl.*``, ``lang2act.*``, ``cave``). Each is a set of named components weighted by one
mapping (``rewards.base.weighted_sum``); the paper's rules are the default and the released
code's rules are registered variants of their own (``*.upstream``; see docs/rewards.md and
docs/rewards_vragrl_lang2act.md).
"""

from evidra.rewards import cave, cave_reward, evisrag, lang2act, lat, vragrl
from evidra.rewards.base import REWARDS, Reward, RewardFn, RewardResult, check_weights, weighted_sum
from evidra.rewards.cave_reward import CaveReward
from evidra.rewards.evisrag import EvisragReward
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_http import OpenAIJudge
from evidra.rewards.judge_prompts import JUDGE_PROMPTS, JudgePrompt
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict
from evidra.rewards.lang2act import Lang2ActReward
from evidra.rewards.lat import LatReward
from evidra.rewards.lat_scoring import LatConfig, Similarity
from evidra.rewards.vragrl import VragRLReward

__all__ = [
    "JUDGE_PROMPTS",
    "REWARDS",
    "CaveReward",
    "EvisragReward",
    "Judge",
    "JudgeItem",
    "JudgePrompt",
    "Lang2ActReward",
    "LatConfig",
    "LatReward",
    "OpenAIJudge",
    "Reward",
    "RewardFn",
    "RewardResult",
    "RuleJudge",
    "Similarity",
    "Verdict",
    "VragRLReward",
    "cave",
    "cave_reward",
    "check_weights",
    "evisrag",
    "lang2act",
    "lat",
    "vragrl",
    "weighted_sum",
]
