"""VRAG-RL rewards: conformance replay of the released functions plus paper-mode behaviour."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.types import Parsed, Sample, Span, Trajectory
from evidra.methods.vragrl.reward import (
    VRAGRL_RULES,
    UnknownDataSourceError,
    VragRLReward,
    compute_format_reward_only,
    compute_score_intended,
    extract_tags,
    get_answer_from_predict_str,
    parse_judge_response_upstream,
    pattern_reward,
    postprocess_predictions,
    remove_text_between_tags,
    train_reward_upstream,
    vragrl_reward,
)
from evidra.metrics.anls import anls_vrag_upstream
from evidra.metrics.ranking import vragrl_ndcg_upstream
from evidra.paradigms.search_agent import validate_bbox_action
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import JudgeItem, Verdict
from evidra.rewards.reward import REWARDS, RewardResult

Loader = Callable[[str], dict[str, Any]]


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return a == b or (math.isnan(a) and math.isnan(float(b)))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b and type(a) is type(b)) or (
        a == b and not isinstance(a, bool) and not isinstance(b, bool)
    )


def _raises_same_class(fn: Callable[..., Any], case: dict[str, Any]) -> str | None:
    """Upstream raised: we must raise an exception of the same class (by name, so an evidra
    error that subclasses the builtin counts). Returns a failure message or None."""
    want = case["exception"]["type"]
    try:
        got = fn(*case.get("args", []), **case.get("kwargs", {}))
    except Exception as exc:
        if any(cls.__name__ == want for cls in type(exc).__mro__):
            return None
        return f"raised {type(exc).__name__}, upstream raised {want}"
    return f"returned {got!r}, upstream raised {want}"


def replay(data: dict[str, Any], fn: Callable[..., Any], convert: Callable[[Any], Any] = lambda x: x) -> int:
    """Run every case; upstream exceptions must be raised with the same class.

    Returns how many cases raised upstream (0 for the sample files)."""
    failures, raised = [], 0
    for i, case in enumerate(data["cases"]):
        if "exception" in case:
            raised += 1
            problem = _raises_same_class(fn, case)
            if problem:
                failures.append(f"case {i} {case.get('note', '')}: {problem}")
            continue
        got = convert(fn(*case.get("args", []), **case.get("kwargs", {})))
        if not _same(got, case["output"]):
            failures.append(f"case {i} {case.get('note', '')}: got {got!r}, want {case['output']!r}")
    assert not failures, "\n".join(failures)
    return raised


def test_conformance_remove_text_between_tags(conformance: Loader) -> None:
    replay(conformance("vrag_remove_text_between_tags"), remove_text_between_tags)


def test_conformance_compute_format_reward_only(conformance: Loader) -> None:
    replay(conformance("vrag_compute_format_reward_only"), compute_format_reward_only)


def test_conformance_get_answer_from_predict_str(conformance: Loader) -> None:
    replay(conformance("vrag_get_answer_from_predict_str"), get_answer_from_predict_str)


def test_conformance_calculate_anls(conformance: Loader) -> None:
    replay(conformance("vrag_calculate_anls"), anls_vrag_upstream)


def test_conformance_extract_tags(conformance: Loader) -> None:
    replay(conformance("vrag_extract_tags"), extract_tags)


def test_conformance_postprocess_predictions(conformance: Loader) -> None:
    replay(
        conformance("vrag_postprocess_predictions"),
        postprocess_predictions,
        lambda r: [list(r[0]), list(r[1])],
    )


def test_conformance_validate_bbox_action(conformance: Loader) -> None:
    replay(conformance("vrag_validate_bbox_action"), validate_bbox_action)


def test_conformance_ndcg(conformance: Loader) -> None:
    replay(conformance("vrag_ndcg"), vragrl_ndcg_upstream)


def test_conformance_parse_judge_response(conformance: Loader) -> None:
    replay(conformance("vrag_parse_judge_response"), parse_judge_response_upstream)


def test_conformance_train_reward(conformance: Loader) -> None:
    """Upstream raises NotImplementedError for unknown data sources: so do we (checked by replay)."""
    replay(conformance("vrag_train_reward"), train_reward_upstream)


def test_conformance_compute_score_deliberate_deviation(conformance: Loader) -> None:
    """Documented deviation: upstream compute_score always raised TypeError (it calls
    compute_format_reward_only with one argument); we return the intended value instead:
    format gate, then ANLS(threshold 0.5) of the last <answer>."""
    cases = conformance("vrag_compute_score")["cases"]
    assert cases
    for case in cases:
        assert case["exception"]["type"] == "TypeError"
        predict, gold = case["args"][0], case["args"][1]
        got = compute_score_intended(*case["args"])
        answer = get_answer_from_predict_str(predict)
        gate = compute_format_reward_only(predict)
        golds = [gold] if isinstance(gold, str) else list(gold)
        want = 0.0 if gate == 0 or answer is None else anls_vrag_upstream(golds, answer, 0.5)
        assert got == want
        assert 0.0 <= got <= 1.0


def test_compute_score_intended_hand_values() -> None:
    assert compute_score_intended("<search>q</search><answer>Paris</answer>", "Paris") == 1.0
    assert compute_score_intended("<answer>Paris</answer>", "Paris") == 0.0  # no search: gated
    # "Pari" vs "Paris": NL = 1/5 -> 0.8
    assert compute_score_intended("<search>q</search><answer>Pari</answer>", ["Paris"]) == pytest.approx(0.8)


def test_train_reward_hand_values() -> None:
    text = "<search>q</search><answer>x</answer>"
    # gold doc_5 at rank 2: ndcg = 1/log2(3) = 0.63093; 0.7*1 + 0.1 + 0.2*0.63093 = 0.926186
    got = train_reward_upstream(text, "rag", ["a/doc_4.jpg", "a/doc_5.jpg"], "doc.pdf", [5], 1.0)
    assert got == pytest.approx(0.8 + 0.2 / math.log2(3))
    assert train_reward_upstream("<answer>x</answer>", "rag", [], "doc.pdf", [5], 1.0) == 0.0
    assert train_reward_upstream(text, "vidoseek", [], "doc.pdf", [5], 1.0, eval_mode=True) == 1.0
    with pytest.raises(UnknownDataSourceError, match="slidevqa_train"):
        train_reward_upstream(text, "slidevqa_train", [], "doc.pdf", [5], 1.0)


def test_empty_gold_labels_raise_value_error() -> None:
    with pytest.raises(InvalidInputError):
        anls_vrag_upstream([], "x")
    with pytest.raises(ValueError):  # Search-R1 heritage: non-string predictions are rejected
        postprocess_predictions([None])  # type: ignore[list-item]


def test_upstream_injection_bug_is_reproduced_only_in_upstream_mode() -> None:
    injected = (
        "<think>t</think><bbox>[1,2]</bbox><|im_end|>\n<|im_start|>user\nYour previous action is invalid. "
        "call a search engine by <search> query </search> ... <answer> Beijing </answer>.\n<|im_end|>"
    )
    assert compute_format_reward_only(injected) == 1.0  # upstream: observation text passes
    assert pattern_reward(["<think>t</think><bbox>[1,2]</bbox>"]) == 0.0  # policy turns only


# --- RewardFn wrapper -----------------------------------------------------------------------


class _ScriptedJudge:
    def __init__(self, values: list[bool | None]) -> None:
        self.values = values
        self.calls: list[list[JudgeItem]] = []

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        self.calls.append(list(items))
        return [Verdict(self.values.pop(0), None if v is not None else "down") for v in list(items)]


UPSTREAM = partial(vragrl_reward, "upstream")


def _sample() -> Sample:
    return Sample(id="s1", question="What is the revenue?", answers=("12.5 bn",), gold_pages=("doc_5",))


def _traj(texts: list[str]) -> Trajectory:
    n = len(texts)
    return Trajectory(
        prompt_ids=(1,),
        token_ids=tuple(range(n)),
        policy_mask=(1,) * n,
        logprobs=(0.0,) * n,
        turns=tuple(Span(i, i + 1) for i in range(n)),
        texts=tuple(texts),
    )


def _parsed(text: str, retrieved: list[str]) -> Parsed:
    return Parsed(text=text, retrieved=tuple(retrieved))


def test_reward_paper_mode_weighted_sum() -> None:
    judge = _ScriptedJudge([True])
    reward = VragRLReward(judge=judge)
    turns = ["<think>t</think><search>revenue</search>", "<think>t2</think><answer> 12.5 bn </answer>"]
    result = reward(_parsed("".join(turns), ["doc_4", "doc_5", "doc_5"]), _sample(), _traj(turns))
    ndcg = 1 / math.log2(3)  # distinct pages: gold at rank 2, duplicate ignored
    assert result.scored
    assert result.components == {"retrieval": pytest.approx(ndcg), "answer": 1.0, "pattern": 1.0}
    assert result.total == pytest.approx(0.2 * ndcg + 0.7 + 0.1)
    assert judge.calls == [[JudgeItem("What is the revenue?", "12.5 bn", "12.5 bn")]]


def test_reward_no_answer_skips_judge_and_scores_zero_answer() -> None:
    judge = _ScriptedJudge([])
    result = VragRLReward(judge=judge)(_parsed("<search>q</search>", ["doc_5"]), _sample(), None)
    assert judge.calls == []
    assert result.components["answer"] == 0.0
    assert result.total == pytest.approx(0.2 * 1.0)  # retrieval only; no final answer -> pattern 0


def test_reward_unscored_when_judge_fails() -> None:
    reward = VragRLReward(judge=_ScriptedJudge([None]))
    result = reward(_parsed("<search>q</search><answer>x</answer>", []), _sample(), None)
    assert not result.scored
    assert result == RewardResult.unscored("judge")
    assert reward.unscored_count == 1


def test_reward_upstream_mode_matches_train_reward() -> None:
    text = (
        "<think>t</think>\n<search>q</search><|im_end|>\n<|im_start|>user\n<|im_end|>\n"
        "<answer>12.5 bn</answer>"
    )
    judge = _ScriptedJudge([True])
    result = UPSTREAM(judge=judge)(_parsed(text, ["doc_4", "doc_5"]), _sample(), None)
    want = train_reward_upstream(text, "rag", ["x/doc_4.jpg", "x/doc_5.jpg"], "doc.pdf", [5], 1.0)
    assert result.total == want
    gated = VragRLReward(judge=_ScriptedJudge([]), rules=VRAGRL_RULES.get("upstream"))(
        _parsed("<answer>a</answer>", []), _sample()
    )
    assert gated.total == 0.0


def test_batch_scoring_calls_judge_once() -> None:
    judge = _ScriptedJudge([True, False])
    reward = VragRLReward(judge=judge)
    a = (_parsed("<search>q</search><answer>12.5 bn</answer>", ["doc_5"]), _sample(), None)
    b = (_parsed("<search>q</search><answer>3</answer>", []), _sample(), None)
    ra, rb = reward.score_batch([a, b])
    assert len(judge.calls) == 1 and len(judge.calls[0]) == 2
    assert ra.total == pytest.approx(1.0) and rb.total == pytest.approx(0.1)


def test_weights_validated_and_registry_names() -> None:
    with pytest.raises(InvalidInputError, match="sum to 1"):
        VragRLReward(weights={"retrieval": 0.5, "answer": 0.5, "pattern": 0.5})
    with pytest.raises(InvalidInputError, match="did you mean 'pattern'"):
        VragRLReward().reweighted({"patern": 0.1})
    for name in ("vragrl.retrieval", "vragrl.pattern", "vragrl.answer", "vragrl.total", "vragrl.upstream"):
        assert name in REWARDS
    rule = VragRLReward(judge=RuleJudge())
    result = rule(_parsed("<search>q</search><answer>It is 12.5 bn.</answer>", ["doc_5"]), _sample())
    assert result.total == pytest.approx(1.0)


def test_paper_mode_ignores_injected_observation_text() -> None:
    """The full decoded text carries the environment's invalid-action message (with <search>
    and <answer> Beijing </answer>); the policy turns do not. Paper mode reads the turns."""
    policy = ["<think>t</think><bbox>[1,2]</bbox>", "<think>t</think>"]
    full = (
        policy[0]
        + "<|im_end|>\n<|im_start|>user\nYour previous action is invalid ... <search> query </search>"
        " ... <answer> Beijing </answer>.\n<|im_end|>\n<|im_start|>assistant\n" + policy[1]
    )
    judge = _ScriptedJudge([])
    paper = VragRLReward(judge=judge)(_parsed(full, []), _sample(), _traj(policy))
    assert judge.calls == [] and paper.total == 0.0
    assert paper.components == {"retrieval": 0.0, "answer": 0.0, "pattern": 0.0}
    upstream_judge = _ScriptedJudge([False])
    upstream = UPSTREAM(judge=upstream_judge)(_parsed(full, []), _sample())
    assert upstream.total == pytest.approx(0.1)  # the released bug: pattern passes on injected text
    assert upstream_judge.calls[0][0].generated == " Beijing "


@pytest.mark.parametrize(
    "turns",
    [
        ["<search> </search>", "<answer>12.5 bn</answer>"],  # empty query is not a search
        ["<answer>12.5 bn</answer>"],  # answering without retrieval
        ["<search>q</search><answer>12.5 bn</answer>", "<think>more</think>"],  # answer not final
        ["<search>q", "</search><answer>x</answer>"],  # tag split across turns
    ],
)
def test_pattern_reward_rejects_hacks(turns: list[str]) -> None:
    assert pattern_reward(turns) == 0.0
