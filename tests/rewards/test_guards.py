"""Reward hacking, measured: hand-made exploits of each paper's reward, scored with the guards
off (the papers' rewards, unchanged) and on (``reward.guards: true``).

Each method's honest oracle answer is rewritten into at least ten exploits (candidate spam,
hedges, dumps, whole-page boxes, copied page text). With guards off many of them earn as much
as the honest answer; with guards on every one is capped at 0 and names the guard it tripped,
while the honest answer keeps its full reward."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evidra.core.types import Sample
from evidra.methods import build_task
from evidra.rewards.guards import GuardConfig, guard, tripped
from evidra.rl.run_config import DataConfig

SECTIONS: dict[str, dict[str, Any]] = {
    "lat": {"name": "lat"},
    "evisrag": {"name": "evisrag"},
    "lang2act.stage1": {"name": "lang2act", "stage": 1},
    "lang2act.stage2": {"name": "lang2act", "stage": 2},
    "vragrl": {"name": "vragrl"},
    "cave": {"name": "cave"},
}
METHODS = list(SECTIONS)
ON = GuardConfig(guards=True)


def _answer_hacks(gold: str, page_text: str) -> dict[str, str]:
    others = ["Tom Berg", "Anna Lind", "Oslo", "42", "Ben Ruiz"]
    return {
        "comma list": ", ".join([others[0], gold, *others[1:3]]),
        "or list": " or ".join([others[0], others[1], gold, others[2]]),
        "line list": "\n".join([*others[:3], gold]),
        "slash list": "/".join([others[3], gold, others[4], others[0]]),
        "semicolons": "; ".join([gold, *others]),
        "gold repeated": ", ".join([gold] * 6),
        "hedge or": f"{gold} or No answer",
        "hedge clause": f"{gold}, though it cannot be determined",
        "hedge unknown": f"Unknown, possibly {gold}",
        "long dump": f"{page_text[:400]} {gold}",
        "verbose": f"The answer could be {gold} and also several other people named in the document such "
        "as the managers, the engineers, the directors, the founders, the sponsors and the partners of it",
    }


def _with_answer(oracle: str, gold: str, answer: str) -> str:
    return oracle.replace(f"<answer>{gold}", f"<answer>{answer}", 1)


def _lat_box_hacks(oracle: str, sample: Sample, page_text: str) -> dict[str, str]:
    page = sample.pages[0]
    whole = f"[0, 0, {page.width}, {page.height}]"
    boxes = re.sub(r"\[\d+, \d+, \d+, \d+\]", whole, oracle)
    cite = re.search(r'Bounding box: \{"bbox_2d": \[[^\]]*\], "Image_index": 1\}', oracle)
    assert cite is not None
    copied = re.sub(r"<think>The document states: [^B]*", f"<think>{page_text} ", oracle, count=1)
    return {"whole-page boxes": boxes, "copied page text": copied}


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Sample, str, dict[str, str]]]:
    out = {}
    for name in METHODS:
        task = build_task(SECTIONS[name])
        path = Path(tmp_path_factory.mktemp(name.replace(".", "_")))
        sample = task.samples(DataConfig(size=2, path=str(path)))[0]
        assert task.oracle is not None
        last = task.oracle(sample)[-1].content[-1]
        oracle = str(getattr(last, "text", last))
        gold = sample.answers[0]
        page_text = " ".join(w.text for p in sample.pages for w in p.words) or "the page text " * 40
        hacks = {k: _with_answer(oracle, gold, v) for k, v in _answer_hacks(gold, page_text).items()}
        if name == "lat":
            hacks |= _lat_box_hacks(oracle, sample, " ".join(w.text for w in sample.pages[0].words))
        out[name] = (sample, oracle, hacks)
    return out


def _score(name: str, sample: Sample, text: str, cfg: GuardConfig) -> tuple[float, tuple[str, ...]]:
    task = build_task(SECTIONS[name])
    parsed = task.parse(text)
    trips = tripped(parsed, sample, cfg)
    return guard(task.reward(parsed, sample), trips).total, trips


@pytest.mark.parametrize("name", METHODS)
def test_guards_cap_every_hack_and_spare_the_honest_answer(name: str, cases: dict) -> None:
    sample, oracle, hacks = cases[name]
    assert len(hacks) >= 10
    honest_off, _ = _score(name, sample, oracle, GuardConfig())
    honest_on, trips = _score(name, sample, oracle, ON)
    assert honest_on == honest_off > 0 and trips == ()
    paid = 0
    for label, text in hacks.items():
        off, none = _score(name, sample, text, GuardConfig())
        on, trips = _score(name, sample, text, ON)
        assert none == (), "guards off must not trip"
        assert trips, f"{name}: no guard caught the {label!r} hack"
        assert on <= 0.0 and on <= off, (label, off, on)
        paid += off > 0
    # the exploits are real: with the papers' rewards most of them are paid
    assert paid >= len(hacks) // 2, f"{name}: only {paid} of {len(hacks)} hacks earn a reward without guards"


def test_lat_hedge_on_an_unanswerable_item_is_caught(cases: dict) -> None:
    sample, oracle, _ = cases["lat"]
    unanswerable = replace(sample, answers=("No answer",), gold_pages=(), gold_boxes=())
    hedge = _with_answer(oracle, sample.answers[0], f"{sample.answers[0]} or No answer")
    off, _ = _score("lat", unanswerable, hedge, GuardConfig())
    on, trips = _score("lat", unanswerable, hedge, ON)
    assert "hedge" in trips and on <= 0.0 < off


def test_guard_counts_trips_and_caps_scopes_and_turns() -> None:
    from evidra.rewards.reward import RewardResult

    result = RewardResult(2.0, {"accuracy": 1.0}, scopes={"answer": 1.0, "format": -1.0}, turns=(0.5, 1.0))
    capped = guard(result, ("hedge",))
    assert capped.total == 0.0 and capped.components["guard:hedge"] == 1.0
    assert dict(capped.scopes) == {"answer": 0.0, "format": -1.0} and capped.turns == (0.0, 0.0)
    assert guard(result, ()) is result
    assert guard(RewardResult.unscored("judge"), ("hedge",)).scored is False


@pytest.mark.parametrize(
    "answer",
    [
        "$1,234,567,890",
        "Tom and Jerry",
        "New York City",
        "No answer",
        "12/05/2020",
        "Paris, France",
        "3.5 million",
        "The Cassini project",
    ],
)
def test_ordinary_answers_trip_no_answer_guard(answer: str) -> None:
    from evidra.core.types import Parsed

    sample = Sample(id="s", question="q", answers=("x",))
    assert tripped(Parsed(text=answer, answer=answer), sample, ON) == ()


def test_answer_guards_split_candidates_and_find_hedges() -> None:
    from evidra.rewards.guards import answer_candidates, is_hedge

    assert answer_candidates("Paris, Lyon or Nice") == ["Paris", "Lyon", "Nice"]
    assert answer_candidates("$1,234,567,890") == ["$1,234,567,890"]
    assert is_hedge("Clara Keller or No answer") and not is_hedge("No answer") and not is_hedge("Clara")
