"""Lang2Act rewards: judged answer, strict format, linguistic-tool validity (Lang2Act §3, A.4).

Output format: ``<think>..</think><description><tool name="X" args="Image k: ..">result</tool>
..</description><answer>..</answer>``.

Four registered variants, each a ``Lang2ActRules`` record with its default weights over the
components answer, format and tool:

* ``lang2act.actionrl`` (stage 1, Lang2Act Eq. 2): the answer reward alone; the format of the
  three blocks is a logged component of weight 0 (A.4's alpha = 0.8, beta = 0.2 weigh Eq. 12,
  stage 2; weights ``{"answer": 0.8, "format": 0.2}`` give the released stage-1 sum).
* ``lang2act.actionrl.upstream`` (released ``actionrl.py``): ``round(0.8 * r_ans + 0.2 * format, 6)``.
* ``lang2act.toolrl`` (stage 2, Eq. 12-13): ``alpha * r_ans + beta * r_tool`` with
  ``r_tool = I_valid(z | T_box)`` binary, alpha = 0.8, beta = 0.2 (A.4).
* ``lang2act.toolrl.upstream`` (released ``toolrl.py``): a strict format gate, then
  ``clip(0.8 * r_ans + 0.1 * format + 0.1 * graded_tool_score)``, rounded to 6 decimals.

The judge (Eq. 2 / Eq. 14) is an injected ``Judge``; an item it cannot score is returned
unscored, never as 0 (the released code scored a failed judge chunk as 0.0). The response
checks (format, tool validity) are in ``lang2act_format``; the released batch scorers
(``*_compute_score_upstream``) are kept for replay.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry
from evidra.core.types import Parsed, Sample, Trajectory
from evidra.methods.lang2act.format import (
    NUMERIC_TOOLS,
    TAGS,
    TOOLBOX,
    StrictFormat,
    actionrl_format_score,
    check_strict_format,
    parse_generation,
    tool_validity,
    validate_tool_content,
)
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict
from evidra.rewards.reward import REWARDS, RewardResult, check_weights, weighted_sum

logger = logging.getLogger(__name__)

DEFAULT_NUM_IMAGES = 3  # the released scorer's default; the trainer never passes num_images
COMPONENTS = ("answer", "format", "tool")
ACTIONRL_UPSTREAM_WEIGHTS = {"answer": 0.8, "format": 0.2}  # actionrl.py
TOOLRL_UPSTREAM_WEIGHTS = {"answer": 0.8, "format": 0.1, "tool": 0.1}  # toolrl.py, in its order of addition


def _round(total: float) -> float:
    return round(total, 6)


def _clip_round(total: float) -> float:
    return round(max(0.0, min(1.0, total)), 6)


def _same(total: float) -> float:
    return total


def parse_judge_batch_upstream(full_text: str | None, n: int) -> list[float] | None:
    """toolrl.py inline parse: ``<judge>(True|False|true|false)</judge>`` only; count must be ``n``."""
    judges = re.findall(r"<judge>(True|False|true|false)</judge>", (full_text or "").strip())
    if len(judges) != n:
        return None
    return [1.0 if j.lower() == "true" else 0.0 for j in judges]


# --- released batch scorers (compute_score), with an injected judge ---------------------------


def _judge_scores(judge: Judge, items: list[JudgeItem]) -> list[float | None]:
    verdicts = judge.judge(items) if items else []
    if len(verdicts) != len(items):
        raise InvalidInputError(f"judge returned {len(verdicts)} verdicts for {len(items)} items")
    return [v.as_score() for v in verdicts]


class UpstreamInput(TypedDict, total=False):
    """One entry of the released scorers' ``reward_inputs``."""

    response: str
    ground_truth: str | None
    prompt: str | None
    num_images: int  # toolrl.py only; DEFAULT_NUM_IMAGES when absent


# a released scorer's record: ``overall`` and the ``*_score`` components, ``scored`` False when unjudged
UpstreamScore = dict[str, float | bool | None]


def _record(overall: float | None, **scores: float | None) -> UpstreamScore:
    record: UpstreamScore = {"overall": overall, **scores}
    if overall is None:
        record["scored"] = False  # the judge stayed unavailable: upstream wrote 0.0 here
    return record


def toolrl_compute_score_upstream(
    reward_inputs: Sequence[UpstreamInput], judge: Judge
) -> list[UpstreamScore]:
    """toolrl.py ``compute_score``: strict format gate, then
    ``clip(0.8 * answer + 0.1 * format + 0.1 * tool, 0, 1)`` rounded to 6 decimals.

    The judge sees ``query = item.get("prompt")`` (None when absent, as the trainer never
    passes it) and is called only for non-empty answers of well-formed responses.
    """
    formats: list[StrictFormat] = []
    tools: list[float] = []
    pending: list[tuple[int, JudgeItem]] = []
    for i, item in enumerate(reward_inputs):
        fmt = check_strict_format(item.get("response", ""))
        formats.append(fmt)
        if not fmt.valid:
            tools.append(0.0)
            continue
        num_images = int(item.get("num_images", DEFAULT_NUM_IMAGES))
        tools.append(validate_tool_content(fmt.parsed["description"], fmt.parsed["think"], num_images))
        if fmt.parsed["answer"]:
            pending.append((i, JudgeItem(item.get("prompt"), item.get("ground_truth"), fmt.parsed["answer"])))
    answers: list[float | None] = [0.0] * len(reward_inputs)
    for (i, _), score in zip(pending, _judge_scores(judge, [p[1] for p in pending]), strict=True):
        answers[i] = score
    out = []
    for fmt, tool, answer in zip(formats, tools, answers, strict=True):
        if not fmt.valid:
            out.append(_record(0.0, answer_score=answer, format_score=0.0, tool_score=0.0))
            continue
        values = {"answer": answer or 0.0, "format": 1.0, "tool": tool}
        overall = None if answer is None else _clip_round(weighted_sum(values, TOOLRL_UPSTREAM_WEIGHTS))
        out.append(_record(overall, answer_score=answer, format_score=1.0, tool_score=tool))
    return out


def actionrl_compute_score_upstream(
    reward_inputs: Sequence[UpstreamInput], judge: Judge
) -> list[UpstreamScore]:
    """actionrl.py ``compute_score``: ``round(0.8 * answer + 0.2 * format, 6)``; the judge is
    called iff the stripped gold and the stripped answer are both non-empty (query = prompt or "")."""
    formats: list[float] = []
    pending: list[tuple[int, JudgeItem]] = []
    for i, item in enumerate(reward_inputs):
        parsed = parse_generation(item.get("response", "") or "")
        formats.append(1.0 if all(parsed[tag] for tag in TAGS) else 0.0)
        gold = (item.get("ground_truth") or "").strip()
        answer = (parsed["answer"] or "").strip()
        if gold and answer:
            pending.append((i, JudgeItem(item.get("prompt", ""), gold, answer)))
    answers: list[float | None] = [0.0] * len(reward_inputs)
    for (i, _), score in zip(pending, _judge_scores(judge, [p[1] for p in pending]), strict=True):
        answers[i] = score
    return [
        _record(
            None
            if a is None
            else _round(weighted_sum({"answer": a, "format": f}, ACTIONRL_UPSTREAM_WEIGHTS)),
            format_score=f,
            answer_score=a,
        )
        for f, a in zip(formats, answers, strict=True)
    ]


# --- the reward and its variants ---------------------------------------------------------------


@dataclass(frozen=True)
class _Prepared:
    values: dict[str, float]  # the rule-based components (format, tool)
    answer: str | None
    gated: bool = False  # True: the released toolrl gate fired (total 0, no judge call)


@dataclass(frozen=True)
class Lang2ActRules:
    """One variant of Lang2Act's reward: how a response is read, what the judge is asked, the
    default weights, and what the released code does to the weighted sum (round, clip)."""

    name: str
    prepare: Callable[[str, Sample, Collection[str], Collection[str]], _Prepared]
    query: Callable[[Sample], str | None]  # the judge item's query
    weights: Mapping[str, float]
    finish: Callable[[float], float] = _same


def _actionrl(text: str, sample: Sample, toolbox: Collection[str], numeric: Collection[str]) -> _Prepared:
    answer = parse_generation(text)["answer"] or None
    return _Prepared({"format": actionrl_format_score(text)}, answer)


def _toolrl_paper(text: str, sample: Sample, toolbox: Collection[str], numeric: Collection[str]) -> _Prepared:
    fmt = check_strict_format(text)
    answer = fmt.parsed["answer"] if fmt.valid else parse_generation(text)["answer"]
    tool = tool_validity(text, len(sample.pages) or DEFAULT_NUM_IMAGES, toolbox, numeric)
    return _Prepared({"format": float(fmt.valid), "tool": tool}, answer or None)


def _toolrl_upstream(
    text: str, sample: Sample, toolbox: Collection[str], numeric: Collection[str]
) -> _Prepared:
    fmt = check_strict_format(text)
    if not fmt.valid:
        return _Prepared({"format": 0.0, "tool": 0.0}, None, gated=True)
    tool = validate_tool_content(fmt.parsed["description"], fmt.parsed["think"], DEFAULT_NUM_IMAGES)
    return _Prepared({"format": 1.0, "tool": tool}, fmt.parsed["answer"] or None)


def _question(sample: Sample) -> str | None:
    return sample.question


LANG2ACT_RULES: Registry[Lang2ActRules] = Registry("Lang2Act reward rules")
LANG2ACT_RULES.add(
    "actionrl", Lang2ActRules("actionrl", _actionrl, _question, {"answer": 1.0, "format": 0.0})
)
LANG2ACT_RULES.add(
    "actionrl.upstream",
    Lang2ActRules("actionrl.upstream", _actionrl, lambda s: "", ACTIONRL_UPSTREAM_WEIGHTS, _round),
)
LANG2ACT_RULES.add(
    "toolrl", Lang2ActRules("toolrl", _toolrl_paper, _question, {"answer": 0.8, "format": 0.0, "tool": 0.2})
)
LANG2ACT_RULES.add(
    "toolrl.upstream",
    Lang2ActRules("toolrl.upstream", _toolrl_upstream, lambda s: None, TOOLRL_UPSTREAM_WEIGHTS, _clip_round),
)


def _policy_text(parsed: Parsed, trajectory: Trajectory | None) -> str:
    return "".join(trajectory.texts) if trajectory is not None and trajectory.texts else parsed.text


class Lang2ActReward:
    """A Lang2Act reward variant (``LANG2ACT_RULES``) as a ``RewardFn``: the weighted sum of the
    judged answer and the rule components (``weights`` replace the variant's defaults).

    ``score_batch`` judges a whole batch in one call. ``toolbox``/``numeric_tools`` are the tools
    the paper-rules tool check accepts (the curated box of stage 2); ``num_images`` is the
    sample's page count (released: always 3).
    """

    components = COMPONENTS

    def __init__(
        self,
        rules: Lang2ActRules | None = None,
        judge: Judge | None = None,
        weights: Mapping[str, float] | None = None,
        toolbox: Collection[str] = TOOLBOX,
        numeric_tools: Collection[str] = NUMERIC_TOOLS,
    ) -> None:
        self.rules = rules if rules is not None else LANG2ACT_RULES.get("toolrl")
        self.judge = judge if judge is not None else RuleJudge()
        self.weights = check_weights(
            self.rules.weights if weights is None else weights, COMPONENTS, "lang2act"
        )
        self.toolbox = frozenset(toolbox)
        self.numeric_tools = frozenset(numeric_tools)  # paper rules: the toolbox's own numeric tools
        self.unscored_count = 0

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def reweighted(self, weights: Mapping[str, float]) -> Lang2ActReward:
        merged = {**self.weights, **check_weights(weights, COMPONENTS, "lang2act")}
        return Lang2ActReward(self.rules, self.judge, merged, self.toolbox, self.numeric_tools)

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_batch([(parsed, sample, trajectory)])[0]

    def score_batch(self, batch: Sequence[tuple[Parsed, Sample, Trajectory | None]]) -> list[RewardResult]:
        prepared, items = [], []
        for parsed, sample, trajectory in batch:
            p = self.rules.prepare(_policy_text(parsed, trajectory), sample, self.toolbox, self.numeric_tools)
            reference = sample.answers[0] if sample.answers else None
            judged = p.answer is not None and bool(reference and reference.strip())
            prepared.append((p, judged))
            if judged:
                items.append(JudgeItem(self.rules.query(sample), reference, p.answer or ""))
        verdicts = iter(self.judge.judge(items) if items else [])
        return [self._result(p, next(verdicts) if judged else Verdict(False)) for p, judged in prepared]

    def _result(self, p: _Prepared, verdict: Verdict) -> RewardResult:
        if p.gated:
            return RewardResult(total=0.0, components=dict.fromkeys(self.weights, 0.0))
        if verdict.value is None:
            self.unscored_count += 1
            logger.debug("Lang2Act item unscored: %s", verdict.error)
            return RewardResult.unscored("judge")
        every = {"answer": float(verdict.value), **p.values}
        values = {name: every[name] for name in self.weights if name in every}
        return RewardResult(total=self.rules.finish(weighted_sum(values, self.weights)), components=values)


def lang2act_reward(
    variant: str = "toolrl",
    *,
    judge: Judge | None = None,
    weights: Mapping[str, float] | None = None,
    toolbox: Collection[str] = TOOLBOX,
    numeric_tools: Collection[str] = NUMERIC_TOOLS,
) -> Lang2ActReward:
    """The Lang2Act reward of a registered variant (``LANG2ACT_RULES``); the options are
    ``Lang2ActReward``'s."""
    return Lang2ActReward(LANG2ACT_RULES.get(variant), judge, weights, toolbox, numeric_tools)


def format_reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """Strict format check alone (toolrl.py ``check_strict_format``) as 0/1."""
    value = float(check_strict_format(_policy_text(parsed, trajectory)).valid)
    return RewardResult(total=value, components={"format": value})


def tool_reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """Lang2Act Eq. 13 alone (binary toolchain validity against ``TOOLBOX``)."""
    value = tool_validity(_policy_text(parsed, trajectory), len(sample.pages) or DEFAULT_NUM_IMAGES)
    return RewardResult(total=value, components={"tool": value})


REWARDS.add("lang2act.format", format_reward)
REWARDS.add("lang2act.tool", tool_reward)
for _variant in LANG2ACT_RULES:
    REWARDS.add(f"lang2act.{_variant}", lang2act_reward(_variant))
