"""Fuzzing: random and adversarial strings through every parser, metric and reward of part B.

Nothing may raise on model output, and every score stays in its documented range.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.types import Parsed, Sample
from evidra.methods.lang2act.format import (
    actionrl_format_score,
    check_strict_format,
    parse_generation,
    tool_validity,
    validate_tool_content,
)
from evidra.methods.lang2act.reward import lang2act_reward, parse_judge_batch_upstream
from evidra.methods.vragrl.reward import (
    compute_format_reward_only,
    compute_score_intended,
    extract_tags,
    get_answer_from_predict_str,
    parse_judge_response_upstream,
    postprocess_predictions,
    remove_text_between_tags,
    train_reward_upstream,
    vragrl_reward,
)
from evidra.metrics.anls import anls, anls_vrag_upstream
from evidra.metrics.mmlongbench import mmlongbench_score
from evidra.metrics.qa import (
    normalize_slidevqa,
    normalize_vqa,
    relaxed_accuracy,
    slidevqa_f1,
    visrag_accuracy,
)
from evidra.metrics.ranking import mrr_at_k, ndcg_at_k, recall_at_k, vragrl_ndcg, vragrl_ndcg_upstream
from evidra.paradigms.search_agent import validate_bbox_action
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import JudgeItem, parse_verdicts

FRAGMENTS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<search>",
    "</search>",
    "<bbox>",
    "</bbox>",
    "<description>",
    "</description>",
    "<THINK>",
    "<judge>",
    "</judge>",
    "True",
    "false",
    "not true",
    '<tool name="read_text_element" args="Image 2: x">',
    "<tool name='zoom' args=\"Image 9:\">",
    "</tool>",
    "<|im_start|>user",
    "<|im_start|>user\n",
    "<|im_end|>",
    "Image 1",
    "Image 4",
    "\n",
    " ",
    "[1, 2, 3, 4]",
    "[-1,0,1,1]",
    "[1e309, 0, 1, 1]",
    "NaN",
    "%",
    "12.5",
    "0",
    "['a', 'b']",
    "[",
    "{",
    "'",
    '"',
    "é",
    "\x00",
]
adversarial = st.lists(st.sampled_from(FRAGMENTS), max_size=25).map("".join)
texts = st.one_of(st.text(max_size=60), adversarial)
short = st.text(max_size=30)
FUZZ = settings(max_examples=120, deadline=None)


def _in01(x: float) -> bool:
    return 0.0 <= x <= 1.0 and not math.isnan(x)


@FUZZ
@given(texts)
def test_vragrl_parsers_never_raise(text: str) -> None:
    assert isinstance(remove_text_between_tags(text), str)
    assert compute_format_reward_only(text) in (0.0, 1.0)
    answer = get_answer_from_predict_str(text)
    assert answer is None or answer in text
    assert isinstance(extract_tags(text), str)
    actions, contents = postprocess_predictions([text])
    assert actions[0] in (None, "search", "answer", "bbox") and isinstance(contents[0], str)
    bbox = validate_bbox_action(text)
    assert bbox == "INVALID" or len(bbox) == 4
    assert parse_judge_response_upstream(text) in (None, True, False)
    assert _in01(compute_score_intended(text, "Paris"))


@FUZZ
@given(
    texts, st.lists(short, max_size=4), st.lists(st.integers(1, 5), max_size=3), st.sampled_from([0.0, 1.0])
)
def test_vragrl_train_reward_range(text: str, paths: list[str], pages: list[int], judge: float) -> None:
    value = train_reward_upstream(text, "rag", paths, "doc.pdf", pages, judge)
    assert value >= 0.0 and not math.isnan(value)


@FUZZ
@given(texts, st.lists(st.sampled_from(["p1", "p2", "p3"]), max_size=4))
def test_vragrl_reward_wrapper_in_range(text: str, retrieved: list[str]) -> None:
    sample = Sample(id="s", question="q?", answers=("p2 answer",), gold_pages=("p2",))
    parsed = Parsed(text=text, retrieved=tuple(retrieved))
    for mode in ("paper", "upstream"):
        result = vragrl_reward(mode, judge=RuleJudge())(parsed, sample)
        assert result.scored and result.total >= 0.0
        if mode == "paper":
            assert _in01(result.total)


@FUZZ
@given(texts, st.integers(0, 12))
def test_judge_parsers_never_raise(text: str, n: int) -> None:
    verdicts = parse_verdicts(text, n)
    assert len(verdicts) == n and all(v.value in (None, True, False) for v in verdicts)
    batch = parse_judge_batch_upstream(text, n)
    assert batch is None or (len(batch) == n and set(batch) <= {0.0, 1.0})
    assert RuleJudge().judge([JudgeItem(text, text[:5], text)])[0].value in (None, True, False)


@FUZZ
@given(texts, st.integers(0, 5))
def test_lang2act_parsers_in_range(text: str, num_images: int) -> None:
    fmt = check_strict_format(text)
    assert fmt.valid == (not fmt.errors)
    assert _in01(validate_tool_content(text, text, num_images))
    assert tool_validity(text, num_images) in (0.0, 1.0)
    assert actionrl_format_score(text) in (0.0, 1.0)
    assert set(parse_generation(text)) == {"think", "description", "answer"}


@FUZZ
@given(texts)
def test_lang2act_rewards_in_range(text: str) -> None:
    sample = Sample(id="s", question="q?", answers=("Image 1",))
    for stage in ("actionrl", "toolrl"):
        for mode in ("paper", "upstream"):
            variant = stage if mode == "paper" else f"{stage}.upstream"
            result = lang2act_reward(variant, judge=RuleJudge())(Parsed(text=text), sample)
            assert result.scored and _in01(result.total)


@FUZZ
@given(texts, st.lists(texts, min_size=1, max_size=3))
def test_metrics_in_range(pred: str, golds: list[str]) -> None:
    assert _in01(anls(pred, golds))
    assert _in01(anls(pred, golds, edge="zero"))
    assert _in01(anls_vrag_upstream(golds, pred))
    assert relaxed_accuracy(pred, golds[0]) in (0.0, 1.0)
    for fmt in ("Int", "Float", "Str", "None", "List"):
        assert _in01(mmlongbench_score(golds[0], pred, fmt))
    assert isinstance(normalize_slidevqa(pred, golds[0]), str)
    assert _in01(slidevqa_f1(pred, golds[0], golds[-1]))
    assert isinstance(normalize_vqa(pred), str)
    for dataset in ("", "chartqa", "arxivqa"):
        assert visrag_accuracy(pred, golds, dataset) in (0.0, 1.0)


@FUZZ
@given(st.lists(st.sampled_from("abcdef"), max_size=8), st.lists(st.sampled_from("abcxyz"), max_size=4))
def test_ranking_in_range(ranking: list[str], gold: list[str]) -> None:
    assert _in01(vragrl_ndcg(ranking, gold))
    assert vragrl_ndcg_upstream(ranking, gold) >= 0.0
    for k in (None, 1, 3):
        assert _in01(ndcg_at_k(ranking, gold, k))
        assert _in01(recall_at_k(ranking, gold, k))
        assert _in01(mrr_at_k(ranking, gold, k))
