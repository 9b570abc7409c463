"""CAVE §3.2.2 scores "a set of textualized visual evidence units": a unit stated twice (on two
pages of a sample) counts once in the mean evidence gain."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from evidra.core.types import Page, Sample, Span
from evidra.methods.cave import reward as cave_reward_module
from evidra.methods.cave.credits import StateScore, evidence_gains, evidence_units
from evidra.methods.cave.reward import CaveReward

PAGES = (Page("p1", "/x/p1.png", 10, 10), Page("p2", "/x/p2.png", 10, 10), Page("p3", "/x/p3.png", 10, 10))
TRIANGLE, CIRCLE = "There is a triangular building.", "The path ends at the circle."
SAMPLE = Sample(
    "s",
    "Which building?",
    ("B",),
    pages=PAGES,
    gold_evidence={"p1": TRIANGLE, "p2": "There is a  triangular building. ", "p3": CIRCLE},
)


def test_duplicate_units_count_once() -> None:
    assert evidence_units(SAMPLE.gold_evidence.values()) == (TRIANGLE, CIRCLE)
    assert evidence_units(["", "  "]) == ()


def test_the_mean_gain_is_over_distinct_units() -> None:
    """Unit gains: triangle +1.0 (-2 -> -1), circle 0; mean over the set {triangle, circle} = 0.5
    (a list holding the triangle twice would give (1 + 1 + 0) / 3)."""
    before, after = StateScore(0.0, 0.0, (-2.0, -1.0)), StateScore(0.0, 0.0, (-1.0, -1.0))
    assert evidence_gains([before, after]) == pytest.approx([0.5])


def test_the_reward_teacher_forces_each_distinct_unit_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """``CaveReward.score_episodes`` hands the teacher-forcing pass each unit once; with the
    triangle's log-likelihood rising by 1.0 over the turn and the circle's flat, the evidence
    credit is 0.5 (hand-computed above), not 2/3."""
    seen: list[list[str]] = []

    def fake_states(vlm: Any, rows: Sequence[Any], top_k: int) -> list[list[StateScore]]:
        out = []
        for *_, units in rows:
            seen.append(list(units))
            rise = tuple(-2.0 if "triangular" in u else -1.0 for u in units)
            out.append([StateScore(0.0, 0.0, rise), StateScore(0.0, 0.0, tuple(-1.0 for _ in units))])
        return out

    monkeypatch.setattr(cave_reward_module, "score_states", fake_states)
    trajectory = SimpleNamespace(turns=(Span(0, 1), Span(1, 2)), prompt_ids=(1, 2), texts=("a", "b"))
    episode = SimpleNamespace(trajectory=trajectory, context=None, sample=SAMPLE, infos=())
    (result,) = CaveReward().score_episodes(None, [episode])  # type: ignore[arg-type]
    assert seen == [[TRIANGLE, CIRCLE]]
    assert result.components["evidence"] == pytest.approx(0.5)
