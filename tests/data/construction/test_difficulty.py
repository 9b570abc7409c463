"""Difficulty filtering: drop all-correct / all-wrong questions, order easy to hard."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import Sample
from evidra.data.construction.difficulty import (
    answer_is_correct,
    count_successes,
    curriculum_stages,
    filter_by_difficulty,
    sample_successes,
)
from evidra.env.single_turn import SingleTurnEnv
from evidra.models.generation import SamplingParams
from evidra.paradigms.direct import Direct
from evidra.rollout import HFBackend, RolloutLimits


def _s(i: str) -> Sample:
    return Sample(i, f"question {i}?", ("yes",), dataset="tunnel_objreid")


@dataclass
class FakeTrajectory:
    texts: tuple[str, ...]


@dataclass
class FakeEpisode:
    sample: Sample
    trajectory: FakeTrajectory


def test_answer_checker_and_counts() -> None:
    check = answer_is_correct(Direct())
    a, b = _s("a"), _s("b")
    eps: list[Any] = [
        FakeEpisode(a, FakeTrajectory(("<think>.</think><answer>{yes}</answer>",))),
        FakeEpisode(a, FakeTrajectory(("<think>.</think><answer>no</answer>",))),
        FakeEpisode(a, FakeTrajectory(("no answer tags",))),
        FakeEpisode(b, FakeTrajectory(("<think>.</think><answer>YES</answer>",))),
    ]
    assert count_successes(eps, check) == {"a": 1, "b": 1}


def test_filter_drops_trivial_and_impossible_and_orders() -> None:
    samples = [_s(i) for i in "abcde"]
    counts = {"a": 4, "b": 1, "c": 0, "d": 3, "e": 2}
    out = filter_by_difficulty(samples, counts, 4)
    assert [s.id for s in out.curriculum] == ["d", "e", "b"]  # 3/4, 2/4, 1/4: easy first
    assert [s.id for s in out.dropped_easy] == ["a"] and [s.id for s in out.dropped_hard] == ["c"]
    assert out.success_rate["e"] == 0.5
    assert [[s.id for s in st] for st in curriculum_stages(out, 2)] == [["d", "e"], ["b"]]  # round(1.5) = 2
    hard = filter_by_difficulty(samples, counts, 4, order="hard_first")
    assert [s.id for s in hard.curriculum] == ["b", "e", "d"]
    with pytest.raises(InvalidInputError, match="sample_successes"):
        filter_by_difficulty(samples, {"a": 1}, 4)


def test_sample_successes_with_the_tiny_policy(tiny_vlms: dict[str, Any], tmp_path: Path) -> None:
    samples = [_s("a"), _s("b"), _s("c")]
    seen: list[str] = []
    steps: list[int] = []

    def is_correct(sample: Sample, episode: Any) -> bool:
        seen.append(sample.id)
        return len(seen) % 2 == 0  # every second completion "correct": counts are known by hand

    counts = sample_successes(
        HFBackend(tiny_vlms["qwen2_5_vl"]),
        lambda s: SingleTurnEnv(Direct()),
        samples,
        2,
        is_correct,
        params=SamplingParams(max_new_tokens=4, seed=0),
        limits=RolloutLimits(max_new_tokens=4),
        batch_size=2,
        progress=steps.append,
    )
    assert steps == [2, 1]  # three samples in batches of two
    assert seen == ["a", "a", "b", "b", "c", "c"]  # k = 2 completions per question, grouped
    assert counts == {"a": 1, "b": 1, "c": 1}
