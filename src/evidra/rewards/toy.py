"""Verifiable rewards of the toy tasks the trainer's learning checks use."""

from __future__ import annotations

from evidra.core.tagscan import first_block
from evidra.core.types import Parsed, Sample, Trajectory
from evidra.rewards.reward import RewardResult


def digit_fraction(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """Share of non-space characters that are ASCII digits (0 for an empty completion).

    >>> digit_fraction(Parsed(text="a1 22"), Sample(id="s", question="q")).total
    0.75
    """
    chars = [c for c in parsed.text if not c.isspace()]
    value = sum(c in "0123456789" for c in chars) / len(chars) if chars else 0.0
    return RewardResult(total=value, components={"digits": value})


def text_length(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """Characters of the completion / 100, capped at 1: a dense reward that differs between
    almost any two completions, so every group carries a learning signal.

    >>> text_length(Parsed(text="x" * 50), Sample(id="s", question="q")).total
    0.5
    """
    value = min(1.0, len(parsed.text) / 100)
    return RewardResult(total=value, components={"length": value})


def key_value_answer(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """1 if the final ``<answer>`` equals a gold answer (stripped), plus a 0.1 format bonus
    for a trajectory that searched before answering."""
    correct = parsed.answer is not None and parsed.answer.strip() in sample.answers
    searched = trajectory is not None and any("<search>" in t for t in trajectory.texts[:-1])
    fmt = 0.1 if searched and parsed.answer is not None else 0.0
    return RewardResult(total=float(correct) + fmt, components={"answer": float(correct), "format": fmt})


def parse_answer(text: str) -> Parsed:
    """The first ``<answer>`` of a completion; missing tags are recorded, never raised."""
    answer = first_block(text, "<answer>", "</answer>")
    if answer is None:
        return Parsed(text=text, errors=("missing <answer>...</answer>",))
    return Parsed(text=text, answer=answer.strip())
