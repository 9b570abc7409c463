"""EVisRAG rewards: replay of the released functions' recorded cases (upstream mode) and
hand-computed paper-mode cases (Eqs. 11-13)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from evidra.core.types import Page, Parsed, Sample, Span, Trajectory
from evidra.methods.evisrag.reward import (
    GoldFormatError,
    derivation_paper,
    derivation_upstream,
    format_reward,
    gold_string,
    observe_punishment,
    paper_rewards,
    perception_paper,
    perception_upstream,
    soft_overlong_punishment,
    sum_all,
    think_punishment,
)
from evidra.metrics.qa import evaluate_predictions
from evidra.metrics.text import normalize_squad, set_f1, substring_em
from evidra.rewards.reward import REWARDS

Same = Callable[[Any, Any], bool]


def bind(case: dict[str, Any], *names: str) -> list[Any]:
    """The case's arguments in the order of upstream's parameter ``names`` (args, then kwargs)."""
    values = dict(zip(names, case.get("args", []), strict=False)) | case.get("kwargs", {})
    return [values[n] for n in names if n in values]


def _replay(case: dict[str, Any], call: Any, same: Callable[[Any, Any], bool]) -> None:
    """Compare with the recorded output; where upstream raised IndexError (gold without the
    block it reads), we raise GoldFormatError, an IndexError, on purpose."""
    if "exception" in case:
        assert case["exception"]["type"] == "IndexError", case["exception"]
        with pytest.raises(GoldFormatError):
            call()
    else:
        got = call()
        assert same(got, case["output"]), (got, case["output"])


@pytest.mark.conformance("evisrag_normalize_answer_qa")
def test_normalize_answer_qa(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: normalize_squad(*bind(case, "s")), same)


@pytest.mark.conformance("evisrag_f1_match")
def test_f1_match(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: set_f1(*bind(case, "response", "ground_truth")), same)


@pytest.mark.conformance("evisrag_em_match")
def test_em_match(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: substring_em(*bind(case, "response", "ground_truth")), same)


@pytest.mark.conformance("evisrag_accuracy_reward")
def test_accuracy_reward(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: derivation_upstream(*bind(case, "response", "ground_truth")), same)


@pytest.mark.conformance("evisrag_evidence_reward")
def test_evidence_reward(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: perception_upstream(*bind(case, "response", "ground_truth")), same)


@pytest.mark.conformance("evisrag_format_reward")
def test_format_reward(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: format_reward(bind(case, "response")[0]), same)


@pytest.mark.conformance("evisrag_isObserve_punishment")
def test_is_observe(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: observe_punishment(*bind(case, "response")), same)


@pytest.mark.conformance("evisrag_isThink_punishment")
def test_is_think(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: think_punishment(*bind(case, "response")), same)


def _overlong_by_hand(length: int, max_len: int, buffer: int, min_len: int) -> float:
    if length < min_len:
        return -1.0
    if length <= max_len - buffer:
        return 0.0
    return (max_len - buffer - length) / buffer if length <= max_len else -1.0


@pytest.mark.conformance("evisrag_soft_overlong_punishment")
def test_soft_overlong(case: dict[str, Any], same: Same) -> None:
    args = bind(
        case, "response_length", "max_response_length", "overlong_buffer_length", "min_response_length"
    )
    if "exception" in case:
        # Documented deviation: upstream's 3-argument call (remove_evidence) raises TypeError;
        # ours defaults min_length to the training value 200.
        assert case["exception"]["type"] == "TypeError" and len(args) == 3
        assert soft_overlong_punishment(*args) == _overlong_by_hand(*args, 200)
        return
    _replay(case, lambda: soft_overlong_punishment(*args), same)


@pytest.mark.conformance("evisrag_sum_all")
def test_sum_all(case: dict[str, Any], same: Same) -> None:
    _replay(case, lambda: [sum_all(**item) for item in bind(case, "reward_inputs")[0]], same)


@pytest.mark.conformance("evisrag_eval_evaluate_predictions")
def test_evaluate_predictions(case: dict[str, Any], same: Same) -> None:
    pred, golds, *rest = bind(case, "output_info", "labeled_answer", "mode")
    # upstream scores only mode='qa'; any other mode returns the initial all-zero metrics
    _replay(case, lambda: evaluate_predictions(pred, golds if rest in ([], ["qa"]) else []), same)


# ---- paper mode, hand-computed ---------------------------------------------------------------

FACT = "[1]: The revenue in 2020 was 5 million dollars"
NEG = "[2]: no relevant information\n[3]: no relevant information"
GOLD = (
    "<evidence>[1]: The revenue in 2020 was 5 million dollars\n[2]: no relevant information\n"
    "[3]: no relevant information</evidence><answer>5 million dollars</answer>"
)


def _response(evidence: str, answer: str, think: str = "t") -> str:
    head = f"<observe>o</observe>\n<evidence>{evidence}</evidence>\n"
    return head + f"<think>{think}</think>\n<answer>{answer}</answer>"


def test_perception_paper() -> None:
    perfect = f"{FACT}\n[2]: no relevant information\n[3]: No relevant information."
    assert perception_paper(_response(perfect, "x"), GOLD) == 1.0
    # [1] "revenue 5 million": set F1 = 0.6 (P = 1, R = 3/7); [2], [3] correct negatives
    # (3 * 0.6 + 1 + 1) / (3 + 1 + 1) = 3.8 / 5
    partial = "[1]: revenue 5 million\n[2]: no relevant information\n[3]: no relevant information"
    assert perception_paper(_response(partial, "x"), GOLD) == pytest.approx(0.76)
    # hallucinated evidence on a negative image and a missing [3]: (3 * 1 + 0 + 0) / 5
    halluc = "[1]: The revenue in 2020 was 5 million dollars\n[2]: a chart of sales"
    assert perception_paper(_response(halluc, "x"), GOLD) == pytest.approx(0.6)
    # "[2]" inside text no longer cuts image 1's evidence (upstream: cut -> EM fails)
    cite = "[1]: The revenue [2] in 2020 was 5 million dollars\n" + NEG
    # pred set adds "2": P = 7/8, R = 1 -> F1 = 14/15; (3 * 14/15 + 1 + 1) / 5 = 0.96
    assert perception_paper(_response(cite, "x"), GOLD) == pytest.approx(0.96)
    assert perception_paper("<answer>x</answer>", GOLD) == 0.0  # no evidence block


def test_perception_six_images_normalised_in_paper_mode() -> None:
    gold = "<evidence>" + "\n".join(f"[{i}]: fact number {i} is here" for i in range(1, 7)) + "</evidence>"
    resp = "<evidence>" + "\n".join(f"[{i}]: fact number {i} is here" for i in range(1, 7)) + "</evidence>"
    assert perception_paper(resp, gold) == 1.0
    assert perception_upstream(resp, gold) == 18.0  # 6 * 3, never normalised


def test_derivation_paper() -> None:
    assert derivation_paper(_response("", "5 million dollars"), GOLD) == 1.0
    # {5, million} vs {5, million, dollars}: P = 1, R = 2/3 -> F1 = 0.8
    assert derivation_paper(_response("", "5 million"), GOLD) == pytest.approx(0.8)
    assert derivation_paper(_response("", "5 million"), "5 million dollars") == pytest.approx(0.8)
    # insufficient context: the gold becomes "insufficient to answer" (Eq. 12)
    refusal = _response("", "Insufficient to answer.")
    assert derivation_paper(refusal, GOLD, sufficient=False) == 1.0
    assert derivation_paper(_response("", "$5,000,000"), GOLD) == 0.0
    assert derivation_paper("<answer>5 million dollars", GOLD) == 0.0  # truncated, no closing tag


def test_format_and_punishments() -> None:
    assert format_reward(_response("e", "a")) == 1.0
    assert format_reward(_response("e", "a") + "<|im_end|>") == 0.0
    assert (
        format_reward("<observe>o</observe><think>t</think><evidence>e</evidence><answer>a</answer>") == 0.0
    )
    assert observe_punishment("<observe>[3] shows</observe>") == -1.0
    assert think_punishment("<think>42</think><answer>42</answer>") == -1.0
    assert soft_overlong_punishment(1280) == -0.5  # (1024 - 1280) / 512


def test_upstream_gold_without_block_raises() -> None:
    with pytest.raises(GoldFormatError, match="no <answer> block"):
        derivation_upstream("<answer>x</answer>", "x")
    with pytest.raises(IndexError):
        perception_upstream("<evidence>[1]: x</evidence>", "x")


def test_paper_rewards_scopes() -> None:
    result = paper_rewards(
        _response(
            "[1]: revenue 5 million\n[2]: no relevant information\n[3]: no relevant information", "5 million"
        ),
        GOLD,
    )
    assert dict(result.components) == pytest.approx({"perception": 0.76, "derivation": 0.8, "format": 1.0})
    assert dict(result.scopes) == pytest.approx(
        {"observe": 0.88, "evidence": 0.88, "think": 0.9, "answer": 0.9}
    )
    assert result.total == pytest.approx(2.56)


def test_evaluate_predictions_refusals() -> None:
    golds = ["no relevant information", "insufficient to answer", "insufficient to answer the question"]
    got = evaluate_predictions("insufficient to answer", golds)
    assert got["em"] == 1 and got["acc"] == 1 and got["hallucination"] == 1
    assert evaluate_predictions("", [""])["em"] == 0  # no overlap: the gold is skipped


def test_reward_fn_wrappers() -> None:
    pages = tuple(
        Page(id=f"p{i}", image_path=f"/nonexistent/{i}.png", width=10, height=10) for i in (1, 2, 3)
    )
    sample = Sample(
        id="s",
        question="revenue?",
        answers=("5 million dollars",),
        pages=pages,
        gold_evidence={"p1": "The revenue in 2020 was 5 million dollars"},
    )
    assert gold_string(sample) == GOLD
    text = _response(
        f"{FACT}\n{NEG}",
        "5 million dollars",
    )
    paper = REWARDS.get("evisrag")(Parsed(text=text), sample)
    assert paper.total == 3.0 and paper.scopes["think"] == 1.0
    up = REWARDS.get("evisrag.upstream")
    assert not up(Parsed(text=text), sample).scored
    traj = Trajectory(
        prompt_ids=(1,),
        token_ids=tuple(range(400)),
        policy_mask=(1,) * 400,
        logprobs=(0.0,) * 400,
        turns=(Span(0, 400),),
        texts=(text,),
    )
    result = up(Parsed(text=text), sample, traj)
    assert result.total == 7.0 and result.components["accuracy"] == 3.0 and result.scopes["overlong"] == 0.0


def test_component_rewards_registered() -> None:
    sample = Sample(id="s", question="q?", answers=("5 million",), extras={"ground_truth": GOLD})
    text = _response(f"{FACT}\n{NEG}", "5 million")  # derivation F1 = 0.8 (see test_derivation_paper)
    assert REWARDS.get("evisrag.derivation")(Parsed(text=text), sample).total == pytest.approx(0.8)
    assert REWARDS.get("evisrag.perception")(Parsed(text=text), sample).total == 1.0
    assert REWARDS.get("evisrag.format")(Parsed(text="junk"), sample).total == 0.0
