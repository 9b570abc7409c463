"""Lang2Act rewards: replay of every released function, and the paper-mode reward."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from evidra.core.types import Page, Parsed, Sample
from evidra.methods.lang2act.format import (
    actionrl_format_score,
    check_strict_format,
    tool_validity,
    validate_tool_content,
)
from evidra.methods.lang2act.judge import lang2act_user_message
from evidra.methods.lang2act.reward import (
    Lang2ActReward,
    actionrl_compute_score_upstream,
    lang2act_reward,
    parse_judge_batch_upstream,
    toolrl_compute_score_upstream,
)
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import JudgeItem, Verdict, parse_verdicts
from evidra.rewards.reward import REWARDS

Loader = Callable[[str], dict[str, Any]]


class RecordingStubJudge:
    """The conformance stub: True iff ``generated.strip().lower() == reference.strip().lower()``."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.inner = RuleJudge(match="stripped_lower")

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        self.calls += [
            {"query": i.query, "reference_answer": i.reference, "generated_answer": i.generated}
            for i in items
        ]
        return self.inner.judge(items)


def _check_cases(data: dict[str, Any], fn: Callable[..., Any]) -> None:
    failures = []
    for i, case in enumerate(data["cases"]):
        if "exception" in case:  # upstream raised: we must raise the same class (by name)
            want = case["exception"]["type"]
            with pytest.raises(Exception) as info:
                fn(*case.get("args", []), **case.get("kwargs", {}))
            if not any(cls.__name__ == want for cls in type(info.value).__mro__):
                failures.append(f"case {i}: raised {type(info.value).__name__}, upstream {want}")
            continue
        got = fn(*case.get("args", []), **case.get("kwargs", {}))
        if got != case["output"]:
            failures.append(f"case {i} {case.get('note', '')}: got {got!r}, want {case['output']!r}")
    assert not failures, "\n".join(failures)


def test_conformance_check_strict_format(conformance: Loader) -> None:
    _check_cases(conformance("lang2act_check_strict_format"), lambda r: check_strict_format(r).as_dict())


def test_conformance_validate_tool_content(conformance: Loader) -> None:
    _check_cases(conformance("lang2act_validate_tool_content"), validate_tool_content)


def test_conformance_parse_judge_batch(conformance: Loader) -> None:
    _check_cases(conformance("lang2act_parse_judge_batch"), parse_judge_batch_upstream)


def test_conformance_build_judge_user_message(conformance: Loader) -> None:
    _check_cases(conformance("lang2act_build_judge_user_message"), lang2act_user_message)


@pytest.mark.parametrize(
    ("name", "fn"),
    [
        ("lang2act_toolrl_compute_score_stubbed_judge", toolrl_compute_score_upstream),
        ("lang2act_actionrl_compute_score_stubbed_judge", actionrl_compute_score_upstream),
    ],
)
def test_conformance_compute_score_with_stub_judge(
    conformance: Loader, name: str, fn: Callable[..., Any]
) -> None:
    failures = []
    for i, case in enumerate(conformance(name)["cases"]):
        assert "exception" not in case
        judge = RecordingStubJudge()
        got = fn(*case["args"], judge=judge)
        if got != case["output"] or judge.calls != case["judge_calls"]:
            failures.append(
                f"case {i}: got {got} / {judge.calls}, want {case['output']} / {case['judge_calls']}"
            )
    assert not failures, "\n".join(failures)


VALID = (
    '<think>Image 2 is relevant.</think>\n<description><tool name="locate_visual_element" '
    "args=\"Image 2: Row for 'France'\">done.</tool>\n"
    '<tool name="read_numeric_value" args="Image 2: Unemployment column">7.2%</tool></description>\n'
    "<answer>7.2%</answer>"
)


class _DownJudge:
    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [Verdict(None, "unreachable") for _ in items]


def _sample(pages: int = 0) -> Sample:
    page_objs = tuple(Page(id=f"p{i}", image_path=f"/x/{i}.png", width=10, height=10) for i in range(pages))
    return Sample(id="s", question="Unemployment in France?", answers=("7.2%",), pages=page_objs)


def test_unscored_judge_is_not_zero() -> None:
    out = toolrl_compute_score_upstream([{"response": VALID, "ground_truth": "7.2%"}], judge=_DownJudge())
    assert out == [
        {"overall": None, "answer_score": None, "format_score": 1.0, "tool_score": 1.0, "scored": False}
    ]
    reward = Lang2ActReward(judge=_DownJudge())
    result = reward(Parsed(text=VALID), _sample())
    assert not result.scored and reward.unscored_count == 1


def test_paper_toolrl_is_binary_tool_validity() -> None:
    reward = lang2act_reward("toolrl", judge=RuleJudge())
    result = reward(Parsed(text=VALID), _sample(pages=3))
    assert result.total == pytest.approx(0.8 * 1.0 + 0.2 * 1.0)
    bad_tool = VALID.replace("read_numeric_value", "zoom_in")
    result = reward(Parsed(text=bad_tool), _sample(pages=3))
    # answer still right (0.8), toolchain invalid (unknown tool) -> r_tool = 0
    assert result.components == {"answer": 1.0, "format": 1.0, "tool": 0.0}
    assert result.total == pytest.approx(0.8)


def test_upstream_toolrl_wrapper_matches_released_formula() -> None:
    reward = lang2act_reward("toolrl.upstream", judge=RuleJudge(match="stripped_lower"))
    # num_images is always 3 upstream; a 9-tool response has tool score 0.9 -> 0.8 + 0.1 + 0.09
    nine = (
        "<think>Image 2</think><description>"
        + '<tool name="read_text_element" args="Image 2: p">d</tool>' * 9
    )
    result = reward(Parsed(text=nine + "</description><answer>7.2%</answer>"), _sample())
    assert result.total == 0.99
    gated = reward(Parsed(text="<think>x</think><answer>7.2%</answer>"), _sample())
    assert gated.total == 0.0 and gated.scored


def test_actionrl_stage_weights() -> None:
    text_ok = "<think>a</think><description>d</description><answer>7.2 %</answer>"
    text_wrong = "<think>a</think><description>d</description><answer>8</answer>"
    no_format = "<answer>8</answer>"  # the released format check wants all three blocks
    paper = lang2act_reward("actionrl", judge=RuleJudge())
    upstream = lang2act_reward("actionrl.upstream", judge=RuleJudge())
    assert (
        paper(Parsed(text=text_ok), _sample()).total == upstream(Parsed(text=text_ok), _sample()).total == 1.0
    )
    # paper (Eq. 2): the answer alone; released: 0.8 x answer + 0.2 x format
    wrong = paper(Parsed(text=text_wrong), _sample())
    assert wrong.total == 0.0 and wrong.components == {"answer": 0.0, "format": 1.0}
    assert upstream(Parsed(text=text_wrong), _sample()).total == 0.2
    assert (
        paper(Parsed(text=no_format), _sample()).total
        == upstream(Parsed(text=no_format), _sample()).total
        == 0.0
    )
    # stage-1 prompt asks for <thinking>, which the released check does not accept
    assert (
        actionrl_format_score("<thinking>a</thinking><description>d</description><answer>x</answer>") == 0.0
    )


def test_tool_validity_hand_cases() -> None:
    assert tool_validity(VALID, num_images=3) == 1.0
    assert tool_validity(VALID, num_images=1) == 0.0  # Image 2 out of range
    assert tool_validity(VALID.replace("Image 2: Row", "Row"), num_images=3) == 0.0  # args lack "Image k:"
    no_tools = "<think>a</think><description>plain</description><answer>x</answer>"
    assert tool_validity(no_tools, num_images=3) == 0.0
    numeric = (
        '<think>a</think><description><tool name="compute_percentage" args="3/4">75%</tool></description>'
    )
    assert tool_validity(numeric + "<answer>75%</answer>", num_images=3) == 1.0


def test_strict_verdicts_reject_hedged_batches() -> None:
    verdicts = parse_verdicts("<judge>True</judge>\n<judge>Maybe</judge>", 2)
    assert [v.value for v in verdicts] == [True, None]
    assert all(v.value is None for v in parse_verdicts("<judge>True</judge>", 2))


def test_registry_names() -> None:
    for name in ("lang2act.format", "lang2act.tool", "lang2act.actionrl", "lang2act.toolrl"):
        assert name in REWARDS
    assert REWARDS.get("lang2act.format")(Parsed(text=VALID), _sample()).total == 1.0


@pytest.mark.parametrize(
    "response",
    [
        # a second <tool opening that is not a well-formed call (no args) next to a valid one
        VALID.replace("</description>", '<tool name="read_text_element">x</tool></description>'),
        # duplicated <answer> block
        VALID + "<answer>8%</answer>",
        # tool call smuggled into <think>
        VALID.replace("Image 2 is relevant.", '<tool name="read_text_element" args="Image 2: a">b</tool>'),
        # truncated output
        VALID[: len(VALID) // 2],
        # a call with swapped attributes naming no toolbox tool, beside valid ones
        VALID.replace("</description>", '<tool args="Image 1: x" name="bogus">y</tool></description>'),
        # the same after the description (the released tool-leakage check counts `<tool name=` only)
        VALID.replace("<answer>", '<tool args="Image 1: x" name="bogus">y</tool><answer>'),
    ],
)
def test_tool_validity_rejects_hacks(response: str) -> None:
    assert tool_validity(response, num_images=3) == 0.0


def test_swapped_attributes_fail_paper_validity_only() -> None:
    """Paper mode: every `<tool` opening must be a well-formed name/args call. The released graded
    score (upstream mode) skips a call it cannot parse, as the released code does."""
    swapped = VALID.replace("</description>", '<tool args="Image 1: x" name="bogus">y</tool></description>')
    assert tool_validity(swapped, num_images=3) == 0.0
    fmt = check_strict_format(swapped)
    assert fmt.valid
    plain = check_strict_format(VALID)
    description, think = plain.parsed["description"], plain.parsed["think"]
    assert validate_tool_content(fmt.parsed["description"], fmt.parsed["think"], 3) == (
        validate_tool_content(description, think, 3)
    )


def test_toolbox_numeric_tools_replace_the_fixed_exemption() -> None:
    curated = (
        '<think>Image 1.</think><description><tool name="subtract_values" args="150, 100">50</tool>'
        "</description><answer>50</answer>"
    )
    box = {"subtract_values"}
    assert tool_validity(curated, 1, box) == 0.0  # not one of the two fixed names: Image k demanded
    assert tool_validity(curated, 1, box, numeric={"subtract_values"}) == 1.0
    reward = Lang2ActReward(judge=RuleJudge(), toolbox=box, numeric_tools=box)
    sample = Sample(id="s", question="Q3 minus Q2?", answers=("50",), pages=_sample(pages=1).pages)
    assert reward(Parsed(text=curated), sample).components["tool"] == 1.0
