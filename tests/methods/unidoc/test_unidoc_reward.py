"""UniDoc-RL's dense reward, one hand-computed case per action type (released rm.py / vrag.py)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import pytest

from evidra.core.types import Box, EvidenceBox, Parsed, Sample
from evidra.env.environment import StepInfo
from evidra.methods.evaluation import text_trajectory
from evidra.methods.unidoc.reward import (
    WEIGHTS,
    SearchRound,
    UniDocReward,
    action_log,
    box_f1,
    candidate_order,
    crop_score,
    format_score,
    retrieval_score,
    select_score,
)
from evidra.rewards.judge_protocol import JudgeItem, Verdict
from evidra.rewards.reward import RewardResult


def _sample(**fields: object) -> Sample:
    base: dict[str, object] = dict(
        id="s", question="Who leads?", answers=("Clara Keller",), gold_pages=("g",)
    )
    return Sample(**{**base, **fields})  # type: ignore[arg-type]


# --- search: NDCG over rank 1 of every search, then rank 2, then rank 3 -------------------------


def test_candidate_order_interleaves_ranks_and_keeps_each_page_once() -> None:
    rounds = [SearchRound(("a", "b", "c"), "a"), SearchRound(("d", "a", "e"), "d")]
    assert candidate_order(rounds) == ["a", "d", "b", "c", "e"]
    assert candidate_order([SearchRound(("a", "b", "c", "x"), "a")]) == ["a", "b", "c"]  # top 3 only


def test_retrieval_reward_is_the_ndcg_of_that_order() -> None:
    # order a, d, g: the one gold page at rank 3 -> (2^1 - 1) / log2(4) = 0.5; IDCG = 1
    rounds = [SearchRound(("a", "g"), "a"), SearchRound(("d",), "d")]
    assert retrieval_score(rounds, ["g"]) == pytest.approx(0.5)
    # two gold pages, one found at rank 1: DCG 1, IDCG 1 + 1/log2(3) = 1.6309...
    assert retrieval_score([SearchRound(("g",), "g")], ["g", "h"]) == pytest.approx(
        1 / (1 + 1 / math.log2(3))
    )
    assert retrieval_score([], ["g"]) == 0.0  # no search, no retrieval reward


# --- select: the kept page against the first gold candidate -------------------------------------


def test_select_reward_counts_searches_that_kept_the_first_gold_candidate() -> None:
    gold = ["g", "h"]
    kept_gold = SearchRound(("a", "g", "h"), "g")  # first gold candidate kept: 1
    kept_later_gold = SearchRound(("h", "b", "g"), "g")  # h comes first: 0
    kept_default = SearchRound(("a", "b"), "a")  # no gold: the first candidate is right: 1
    kept_other = SearchRound(("a", "b"), "b")  # no gold, not the first: 0
    assert select_score([kept_gold, kept_later_gold, kept_default, kept_other], gold) == pytest.approx(0.5)
    assert select_score([], gold) == 0.0


# --- bbox: F1 at IoU 0.5 between the page's target regions and the crops ------------------------


def test_box_f1_hand_cases() -> None:
    target = Box(0, 0, 10, 10)
    assert box_f1([], []) == 1.0  # no crop needed, none made
    assert box_f1([], [target]) == 0.0 and box_f1([target], []) == 0.0
    assert box_f1([target], [target]) == pytest.approx(1.0)
    # half overlap: IoU 50 / 150 = 1/3 < 0.5 -> no true positive
    assert box_f1([target], [Box(5, 0, 15, 10)]) == pytest.approx(0.0)
    # one exact crop and one stray: P = 1/2, R = 1 -> F1 = 2/3
    assert box_f1([target], [target, Box(50, 50, 60, 60)]) == pytest.approx(2 / 3)
    # two targets, one found: P = 1, R = 1/2 -> 2/3; IoU exactly 0.5 counts (>=)
    half = Box(0, 0, 10, 5)  # IoU with target = 50 / 100
    assert box_f1([target, Box(20, 20, 30, 30)], [half]) == pytest.approx(2 / 3)


def test_crop_reward_reads_the_evidence_box_of_the_kept_page_only() -> None:
    evidence = EvidenceBox("g", Box(0, 0, 100, 50))
    sample = _sample(evidence_box=evidence)
    on_gold = SearchRound(("g",), "g", (Box(0, 0, 100, 50),))  # 1
    gold_uncropped = SearchRound(("g",), "g")  # the gold page needs a crop: 0
    other_uncropped = SearchRound(("a",), "a")  # nothing to crop there: 1
    other_cropped = SearchRound(("a",), "a", (Box(0, 0, 5, 5),))  # a crop where none is needed: 0
    rounds = [on_gold, gold_uncropped, other_uncropped, other_cropped]
    assert crop_score(rounds, sample) == pytest.approx(0.5)
    # without an evidence box the gold answer boxes on the page are the targets
    boxed = _sample(gold_boxes=(EvidenceBox("g", Box(10, 10, 20, 20)),))
    assert crop_score([SearchRound(("g",), "g", (Box(10, 10, 20, 20),))], boxed) == pytest.approx(1.0)


# --- format: search, select, information and answer -------------------------------------------


@pytest.mark.parametrize(
    ("turns", "expected"),
    [
        (["<search>q</search>", "<select>0</select>", "<information>x</information><answer>y</answer>"], 1.0),
        (["<search>q</search>", "<select>0</select><information>x</information>"], 0.5),
        (["<search>q</search>", "<information>x</information><answer>y</answer>"], 0.0),  # no select
        (["<search>q</search><select>0</select><answer>y</answer>"], 0.0),  # no information
        (["<search>q</search><select>0</select><information>x<answer>y</answer>"], 0.0),  # unclosed
        ([], 0.0),
    ],
)
def test_format_reward(turns: list[str], expected: float) -> None:
    assert format_score(turns) == expected


# --- the action log read from the environment's steps -----------------------------------------


def test_action_log_rounds_from_step_infos() -> None:
    infos = [
        StepInfo("search", candidates=("a", "g", "b"), page_id="a"),
        StepInfo("select", page_id="g"),
        StepInfo("bbox", page_id="g", crop=(0, 0, 100, 50)),
        StepInfo("select", invalid=True, reason="bad"),  # invalid steps change nothing
        StepInfo("search", query="q"),  # no candidates: no round
        StepInfo("search", candidates=("c",), page_id="c"),
        StepInfo("bbox", page_id="g", crop=(1, 1, 2, 2)),  # not the kept page of this round
        StepInfo("select", page_id="zz"),  # not a candidate of this round
    ]
    assert action_log(infos) == [
        SearchRound(("a", "g", "b"), "g", (Box(0, 0, 100, 50),)),
        SearchRound(("c",), "c"),
    ]


# --- the total -------------------------------------------------------------------------------


class CountingJudge:
    def __init__(self, value: bool | None = True) -> None:
        self.value = value
        self.items: list[JudgeItem] = []

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        self.items.extend(items)
        return [Verdict(self.value, None if self.value is not None else "down") for _ in items]


GOOD_TURNS = (
    "<think>a</think><search>who leads</search>",
    "<think>b</think><select>1</select>",
    "<think>c</think><bbox>[0, 0, 100, 50]</bbox>",
    "<think>d</think><information>Clara Keller</information><answer>Clara Keller</answer>",
)
GOOD_INFOS = (
    StepInfo("search", candidates=("a", "g", "b"), page_id="a"),
    StepInfo("select", page_id="g"),
    StepInfo("bbox", page_id="g", crop=(0, 0, 100, 50)),
    StepInfo("answer", answer="Clara Keller"),
)


def _score(
    reward: UniDocReward, turns: Sequence[str], infos: Sequence[StepInfo], sample: Sample
) -> RewardResult:
    parsed = Parsed(text=turns[-1] if turns else "")
    return reward.score_steps(parsed, sample, text_trajectory(tuple(turns)), tuple(infos))


def test_total_is_the_released_weighted_sum() -> None:
    sample = _sample(evidence_box=EvidenceBox("g", Box(0, 0, 100, 50)))
    judge = CountingJudge(True)
    result = _score(UniDocReward(judge), GOOD_TURNS, GOOD_INFOS, sample)
    # order a, g, b: gold at rank 2 -> 1/log2(3); select 1; crop 1; format 1; answer 1
    ndcg = 1 / math.log2(3)
    assert result.components["retrieval"] == pytest.approx(ndcg)
    expected = 0.6 + 0.1 * (ndcg + 1 + 1 + 1)
    assert result.total == pytest.approx(expected)
    assert judge.items == [JudgeItem("Who leads?", "Clara Keller", "Clara Keller")]
    assert dict(WEIGHTS) == {"answer": 0.6, "retrieval": 0.1, "select": 0.1, "crop": 0.1, "format": 0.1}


def test_without_an_answer_the_format_is_half_and_the_judge_is_not_asked() -> None:
    sample = _sample()
    judge = CountingJudge(True)
    turns = (*GOOD_TURNS[:2], "<think>d</think><information>x</information><search>more</search>")
    infos = (GOOD_INFOS[0], GOOD_INFOS[1], StepInfo("search", query="more", candidates=("b",), page_id="b"))
    result = _score(UniDocReward(judge), turns, infos, sample)
    # order a, b, g: gold at rank 3 -> 0.5; select: round 1 kept g (1), round 2 kept b, no gold (1)
    # crop: g needs no crop here (no boxes in the sample) and none made: 1, b likewise: 1
    assert dict(result.components) == {
        "answer": 0.0,
        "retrieval": pytest.approx(0.5),
        "select": 1.0,
        "crop": 1.0,
        "format": 0.5,
    }
    assert result.total == pytest.approx(0.1 * (0.5 + 1 + 1 + 0.5))
    assert judge.items == []


def test_a_correct_answer_without_select_earns_nothing() -> None:
    judge = CountingJudge(True)
    turns = ("<think>a</think><search>q</search>", "<think>b</think><answer>Clara Keller</answer>")
    infos = (StepInfo("search", candidates=("g",), page_id="g"), StepInfo("answer"))
    result = _score(UniDocReward(judge), turns, infos, _sample())
    assert result.total == 0.0 and result.components["format"] == 0.0
    assert judge.items == []  # the released gate: no judge call below format 1


def test_a_judge_that_fails_leaves_the_episode_unscored() -> None:
    reward = UniDocReward(CountingJudge(None))
    result = _score(reward, GOOD_TURNS, GOOD_INFOS, _sample())
    assert not result.scored and reward.unscored_count == 1


def test_called_as_a_plain_reward_the_action_components_are_zero() -> None:
    result = UniDocReward(CountingJudge(True))(
        Parsed(text=GOOD_TURNS[-1]), _sample(), text_trajectory(GOOD_TURNS)
    )
    assert result.components["retrieval"] == 0.0 and result.components["select"] == 0.0
    assert result.components["crop"] == 0.0 and result.components["answer"] == 1.0


def test_weights_are_checked_and_reweighted() -> None:
    from evidra.core.errors import InvalidInputError

    with pytest.raises(InvalidInputError, match="did you mean 'select'"):
        UniDocReward(weights={"selct": 1.0})
    only_answer = UniDocReward(CountingJudge(True)).reweighted(
        {"retrieval": 0, "select": 0, "crop": 0, "format": 0}
    )
    result = _score(only_answer, GOOD_TURNS, GOOD_INFOS, _sample())
    assert result.total == pytest.approx(0.6)
