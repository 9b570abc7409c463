"""What the methods' rewards share: the reward protocol and its registry, box and text primitives,
scope spans, guards, the judge (rule and model-based) and its prompt registry.

A paper's own reward lives in its folder (``methods/<paper>/reward.py``) and registers itself in
``REWARDS`` when that folder is imported; each is a set of named components weighted by one mapping
(``rewards.reward.weighted_sum``), the paper's rules by default and the released code's rules as
registered variants (``*.upstream``; see docs/rewards.md and docs/rewards_vragrl_lang2act.md).
"""

from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_http import OpenAIJudge
from evidra.rewards.judge_prompts import JUDGE_PROMPTS, JudgePrompt
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict
from evidra.rewards.reward import REWARDS, Reward, RewardFn, RewardResult, check_weights, weighted_sum

__all__ = [
    "JUDGE_PROMPTS",
    "REWARDS",
    "Judge",
    "JudgeItem",
    "JudgePrompt",
    "OpenAIJudge",
    "Reward",
    "RewardFn",
    "RewardResult",
    "RuleJudge",
    "Verdict",
    "check_weights",
    "weighted_sum",
]
