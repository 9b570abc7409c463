"""Difficulty filtering and curriculum ordering of training questions.

Sample ``k`` completions per question with the current policy (``evidra.rollout``), count
the correct ones, drop the questions every completion solves or none does (they give GRPO a
zero advantage: all rewards in the group are equal), and order the rest from easy to hard.
EVisRAG drops items solved by all 8 completions and trains simple-to-complex (App. A.2); the
selection itself is ``difficulty_filter`` below.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from evidra.core.errors import InvalidInputError
from evidra.core.types import Parsed, Sample
from evidra.env.environment import Environment
from evidra.metrics.official import official
from evidra.models.generation import SamplingParams
from evidra.paradigms.paradigm import Paradigm
from evidra.rollout import Episode, GenerationBackend, RolloutLimits, rollout

IsCorrect = Callable[[Sample, Episode], bool]


def answer_is_correct(paradigm: Paradigm, threshold: float = 0.5) -> IsCorrect:
    """Correct when the benchmark's official metric of the parsed final answer reaches ``threshold``."""
    return parsed_answer_is_correct(paradigm.parse, threshold)


def parsed_answer_is_correct(parse: Callable[[str], Parsed], threshold: float = 0.5) -> IsCorrect:
    """``answer_is_correct`` with any parser (a task's ``parse``)."""

    def check(sample: Sample, episode: Episode) -> bool:
        texts = episode.trajectory.texts
        answer = parse(texts[-1]).answer if texts else None
        if answer is None:
            return False
        scores = official(sample, answer)
        return max(scores.values(), default=0.0) >= threshold

    return check


def count_successes(episodes: Sequence[Episode], is_correct: IsCorrect) -> dict[str, int]:
    """Correct completions per sample id (episodes of one sample share its id)."""
    counts: dict[str, int] = {}
    for ep in episodes:
        counts[ep.sample.id] = counts.get(ep.sample.id, 0) + int(is_correct(ep.sample, ep))
    return counts


def sample_successes(
    backend: GenerationBackend,
    make_env: Callable[[Sample], Environment],
    samples: Sequence[Sample],
    k: int,
    is_correct: IsCorrect,
    *,
    params: SamplingParams | None = None,
    limits: RolloutLimits | None = None,
    batch_size: int = 8,
    progress: Callable[[int], None] | None = None,
) -> dict[str, int]:
    """Roll out ``k`` completions per sample (temperature 1 by default) and count correct ones;
    ``progress(n)`` after each batch of ``n`` samples (``len(samples)`` in all)."""
    if k < 1:
        raise InvalidInputError(f"k must be >= 1, got {k}")
    counts: dict[str, int] = {}
    for i in range(0, len(samples), batch_size):
        batch = samples[i : i + batch_size]
        episodes = rollout(backend, make_env, batch, k, params or SamplingParams(), limits or RolloutLimits())
        counts.update(count_successes(episodes, is_correct))
        if progress is not None:
            progress(len(batch))
    return counts


@dataclass(frozen=True)
class FilteredSet:
    """Kept samples in curriculum order, what was dropped, and each sample's success rate."""

    curriculum: tuple[Sample, ...]
    dropped_easy: tuple[Sample, ...]
    dropped_hard: tuple[Sample, ...]
    success_rate: dict[str, float]


def filter_by_difficulty(
    samples: Sequence[Sample],
    successes: dict[str, int],
    k: int,
    *,
    min_success: int = 1,
    max_success: int | None = None,
    order: Literal["easy_first", "hard_first"] = "easy_first",
) -> FilteredSet:
    """Drop all-wrong (< ``min_success``) and all-right (> ``max_success``, default k - 1) samples."""
    missing = [s.id for s in samples if s.id not in successes]
    if missing:
        raise InvalidInputError(f"no success counts for samples {missing[:5]}; run sample_successes first")
    sel = difficulty_filter(
        {s.id: successes[s.id] for s in samples},
        k,
        min_success=min_success,
        max_success=max_success,
        order=order,
    )
    by_id = {s.id: s for s in samples}
    return FilteredSet(
        curriculum=tuple(by_id[str(q)] for q in sel.curriculum),
        dropped_easy=tuple(by_id[str(q)] for q in sel.dropped_easy),
        dropped_hard=tuple(by_id[str(q)] for q in sel.dropped_hard),
        success_rate={s.id: successes[s.id] / k for s in samples},
    )


def curriculum_stages(filtered: FilteredSet, stages: int) -> list[tuple[Sample, ...]]:
    """Split the curriculum into ``stages`` consecutive, near-equal parts (easy stage first)."""
    if stages < 1:
        raise InvalidInputError(f"stages must be >= 1, got {stages}")
    items = filtered.curriculum
    bounds = [round(i * len(items) / stages) for i in range(stages + 1)]
    return [items[bounds[i] : bounds[i + 1]] for i in range(stages)]


@dataclass(frozen=True)
class DifficultySelection:
    """Question ids kept by difficulty filtering, in input order and in curriculum order."""

    kept: list[Hashable]
    curriculum: list[Hashable]  # easiest (highest success rate) first
    dropped_easy: list[Hashable]
    dropped_hard: list[Hashable]


def difficulty_filter(
    successes: Mapping[Hashable, float],
    k: int,
    *,
    min_success: float = 0.0,
    max_success: float | None = None,
    order: Literal["easy_first", "hard_first"] = "easy_first",
) -> DifficultySelection:
    """Keep questions whose success count out of ``k`` sampled completions lies in
    ``[min_success, max_success]`` (default ``max_success = k - 1``: drop questions solved by all
    k, as EVisRAG drops perfect-score items out of 8 completions, App. A.2), then order them for
    a curriculum by success rate (EVisRAG: simple to complex). Ties keep input order.

    >>> difficulty_filter({"a": 8, "b": 3, "c": 6}, 8).curriculum
    ['c', 'b']
    """
    if k < 1:
        raise InvalidInputError(f"k (completions per question) must be >= 1, got {k}")
    high = k - 1 if max_success is None else max_success
    if min_success > high:
        raise InvalidInputError(
            f"min_success {min_success} exceeds max_success {high}; nothing would be kept"
        )
    bad = {q: s for q, s in successes.items() if not 0 <= s <= k}
    if bad:
        raise InvalidInputError(f"success counts must lie in [0, {k}], got {bad}")
    kept = [q for q, s in successes.items() if min_success <= s <= high]
    ranked = sorted(kept, key=lambda q: -successes[q] if order == "easy_first" else successes[q])
    return DifficultySelection(
        kept=kept,
        curriculum=ranked,
        dropped_easy=[q for q, s in successes.items() if s > high],
        dropped_hard=[q for q, s in successes.items() if s < min_success],
    )
