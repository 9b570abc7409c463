"""Scoring rules of the five papers, built from shared primitives (text, boxes, ranking, judge)."""

from evidra.rewards.base import REWARDS, RewardFn, RewardResult

__all__ = ["REWARDS", "RewardFn", "RewardResult"]
