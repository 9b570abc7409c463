"""Lang2Act rewards: judged answer, strict format, linguistic-tool validity (Lang2Act §3, A.4).

Output format: ``<think>..</think><description><tool name="X" args="Image k: ..">result</tool>
..</description><answer>..</answer>``.

* Stage 1 (action RL, ``actionrl.py``): ``0.8 * r_ans + 0.2 * format``, format = the three
  blocks present and non-empty. Paper and released code agree on the weights (A.4).
* Stage 2 (tool RL): the paper's Eq. 12-13 is ``alpha * r_ans + beta * r_tool`` with
  ``r_tool = I_valid(z | T_box)`` binary, alpha = 0.8, beta = 0.2 (A.4). The released
  ``toolrl.py`` instead gates on a strict format check and uses
  ``clip(0.8 * r_ans + 0.1 * format + 0.1 * graded_tool_score)``: ``mode="upstream"``.

The judge (Eq. 2 / Eq. 14) is an injected ``Judge``; an item it cannot score is returned
unscored, never as 0 (the released code scored a failed judge chunk as 0.0).

The response checks (format, tool validity) are in ``lang2act_format``; this module combines
them with the judged answer (the released batch scorers and the ``Lang2ActReward``
``RewardFn``), re-exports the checks and registers ``lang2act.*`` in ``REWARDS`` on import.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evidra.errors import InvalidInputError
from evidra.rewards.base import REWARDS, RewardResult
from evidra.rewards.judge import Judge, JudgeItem, RuleJudge, Verdict
from evidra.rewards.judge import lang2act_user_message as build_judge_user_message

# Re-exports: callers import every check from this module, wherever it is defined.
from evidra.rewards.lang2act_format import _ARGS_PREFIX as _ARGS_PREFIX
from evidra.rewards.lang2act_format import _IMAGE_ID as _IMAGE_ID
from evidra.rewards.lang2act_format import _TAGS as _TAGS
from evidra.rewards.lang2act_format import _TOOL_OPEN as _TOOL_OPEN
from evidra.rewards.lang2act_format import ALLOWED_TOOLS_UPSTREAM as ALLOWED_TOOLS_UPSTREAM
from evidra.rewards.lang2act_format import NUMERIC_TOOLS as NUMERIC_TOOLS
from evidra.rewards.lang2act_format import TOOLBOX as TOOLBOX
from evidra.rewards.lang2act_format import StrictFormat as StrictFormat
from evidra.rewards.lang2act_format import ToolCall as ToolCall
from evidra.rewards.lang2act_format import _invalid as _invalid
from evidra.rewards.lang2act_format import _tool_penalties as _tool_penalties
from evidra.rewards.lang2act_format import actionrl_format_score as actionrl_format_score
from evidra.rewards.lang2act_format import check_strict_format as check_strict_format
from evidra.rewards.lang2act_format import parse_generation as parse_generation
from evidra.rewards.lang2act_format import parse_tools as parse_tools
from evidra.rewards.lang2act_format import tool_validity as tool_validity
from evidra.rewards.lang2act_format import validate_tool_content as validate_tool_content
from evidra.types import Parsed, Sample, Trajectory

logger = logging.getLogger(__name__)

__all__ = ["build_judge_user_message"]

DEFAULT_NUM_IMAGES = 3  # the released scorer's default; the trainer never passes num_images


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


def _record(overall: float | None, **scores: float | None) -> dict[str, Any]:
    record: dict[str, Any] = {"overall": overall, **scores}
    if overall is None:
        record["scored"] = False  # the judge stayed unavailable: upstream wrote 0.0 here
    return record


def toolrl_compute_score_upstream(
    reward_inputs: Sequence[Mapping[str, Any]], judge: Judge
) -> list[dict[str, Any]]:
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
        overall = (
            None if answer is None else round(max(0.0, min(1.0, 0.8 * answer + 0.1 * 1.0 + 0.1 * tool)), 6)
        )
        out.append(_record(overall, answer_score=answer, format_score=1.0, tool_score=tool))
    return out


def actionrl_compute_score_upstream(
    reward_inputs: Sequence[Mapping[str, Any]], judge: Judge
) -> list[dict[str, Any]]:
    """actionrl.py ``compute_score``: ``round(0.8 * answer + 0.2 * format, 6)``; the judge is
    called iff the stripped gold and the stripped answer are both non-empty (query = prompt or "")."""
    formats: list[float] = []
    pending: list[tuple[int, JudgeItem]] = []
    for i, item in enumerate(reward_inputs):
        parsed = parse_generation(item.get("response", "") or "")
        formats.append(1.0 if all(parsed[tag] for tag in _TAGS) else 0.0)
        gold = (item.get("ground_truth") or "").strip()
        answer = (parsed["answer"] or "").strip()
        if gold and answer:
            pending.append((i, JudgeItem(item.get("prompt", ""), gold, answer)))
    answers: list[float | None] = [0.0] * len(reward_inputs)
    for (i, _), score in zip(pending, _judge_scores(judge, [p[1] for p in pending]), strict=True):
        answers[i] = score
    return [
        _record(None if a is None else round(0.8 * a + 0.2 * f, 6), format_score=f, answer_score=a)
        for f, a in zip(formats, answers, strict=True)
    ]


# --- RewardFn wrapper ------------------------------------------------------------------------

Stage = Literal["actionrl", "toolrl"]
Mode = Literal["paper", "upstream"]


@dataclass(frozen=True)
class _Prepared:
    answer: str | None
    format: float
    tool: float
    gated: bool  # True: the released toolrl gate fired (overall 0, no judge call)


class Lang2ActReward:
    """Lang2Act stage-1 (``actionrl``) or stage-2 (``toolrl``) reward as a ``RewardFn``.

    ``alpha``/``beta`` weight answer and the second term (format in stage 1, tool validity in
    stage 2; Lang2Act Eq. 12, A.4: 0.8 / 0.2). ``mode="upstream"`` reproduces the released
    stage-2 gate and the 0.1 format + 0.1 graded-tool split. ``num_images`` defaults to the
    sample's page count (upstream: always 3).
    """

    def __init__(
        self,
        stage: Stage = "toolrl",
        judge: Judge | None = None,
        mode: Mode = "paper",
        alpha: float = 0.8,
        beta: float = 0.2,
        toolbox: Collection[str] = TOOLBOX,
        numeric_tools: Collection[str] = NUMERIC_TOOLS,
    ) -> None:
        if stage not in ("actionrl", "toolrl") or mode not in ("paper", "upstream"):
            raise InvalidInputError(
                f"Lang2Act stage must be 'actionrl' or 'toolrl' and mode 'paper' or 'upstream', "
                f"got {stage!r}, {mode!r}"
            )
        self.stage, self.mode, self.alpha, self.beta = stage, mode, alpha, beta
        self.judge = judge if judge is not None else RuleJudge()
        self.toolbox = frozenset(toolbox)
        self.numeric_tools = frozenset(numeric_tools)  # paper mode: the toolbox's own numeric tools
        self.unscored_count = 0

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_batch([(parsed, sample, trajectory)])[0]

    def _prepare(self, text: str, sample: Sample) -> _Prepared:
        if self.stage == "actionrl":
            blocks = parse_generation(text)
            return _Prepared(blocks["answer"] or None, actionrl_format_score(text), 0.0, False)
        fmt = check_strict_format(text)
        if self.mode == "upstream":
            if not fmt.valid:
                return _Prepared(None, 0.0, 0.0, True)
            tool = validate_tool_content(fmt.parsed["description"], fmt.parsed["think"], DEFAULT_NUM_IMAGES)
            return _Prepared(fmt.parsed["answer"] or None, 1.0, tool, False)
        num_images = len(sample.pages) or DEFAULT_NUM_IMAGES
        answer = fmt.parsed["answer"] if fmt.valid else parse_generation(text)["answer"]
        return _Prepared(
            answer or None,
            float(fmt.valid),
            tool_validity(text, num_images, self.toolbox, self.numeric_tools),
            False,
        )

    def _query(self, sample: Sample) -> str | None:
        if self.mode == "paper":
            return sample.question
        return None if self.stage == "toolrl" else ""

    def score_batch(self, batch: Sequence[tuple[Parsed, Sample, Trajectory | None]]) -> list[RewardResult]:
        prepared, items = [], []
        for parsed, sample, trajectory in batch:
            text = "".join(trajectory.texts) if trajectory is not None and trajectory.texts else parsed.text
            p = self._prepare(text, sample)
            reference = sample.answers[0] if sample.answers else None
            judged = p.answer is not None and bool(reference and reference.strip())
            prepared.append((p, judged))
            if judged:
                items.append(JudgeItem(self._query(sample), reference, p.answer or ""))
        verdicts = iter(self.judge.judge(items) if items else [])
        return [self._result(p, next(verdicts) if judged else Verdict(False)) for p, judged in prepared]

    def _result(self, p: _Prepared, verdict: Verdict) -> RewardResult:
        if p.gated:
            return RewardResult(total=0.0, components={"answer": 0.0, "format": 0.0, "tool": 0.0})
        if verdict.value is None:
            self.unscored_count += 1
            logger.debug("Lang2Act item unscored: %s", verdict.error)
            return RewardResult.unscored("judge")
        answer = float(verdict.value)
        components = {"answer": answer, "format": p.format, "tool": p.tool}
        if self.stage == "actionrl":
            # Lang2Act Eq. 2: stage 1 maximises the answer reward alone; the released actionrl.py
            # adds 0.2 x its format check (upstream mode). The format stays a logged component.
            upstream = round(self.alpha * answer + self.beta * p.format, 6)
            total = upstream if self.mode == "upstream" else answer
            return RewardResult(total=total, components={"answer": answer, "format": p.format})
        if self.mode == "upstream":
            total = round(max(0.0, min(1.0, 0.8 * answer + 0.1 * p.format + 0.1 * p.tool)), 6)
        else:
            total = self.alpha * answer + self.beta * p.tool  # Lang2Act Eq. 12
        return RewardResult(total=total, components=components)


def format_reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """Strict format check alone (toolrl.py ``check_strict_format``) as 0/1."""
    text = "".join(trajectory.texts) if trajectory is not None and trajectory.texts else parsed.text
    value = float(check_strict_format(text).valid)
    return RewardResult(total=value, components={"format": value})


def tool_reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """Lang2Act Eq. 13 alone (binary toolchain validity against ``TOOLBOX``)."""
    text = "".join(trajectory.texts) if trajectory is not None and trajectory.texts else parsed.text
    value = tool_validity(text, len(sample.pages) or DEFAULT_NUM_IMAGES)
    return RewardResult(total=value, components={"tool": value})


REWARDS.add("lang2act.format", format_reward)
REWARDS.add("lang2act.tool", tool_reward)
REWARDS.add("lang2act.actionrl", Lang2ActReward(stage="actionrl"))
REWARDS.add("lang2act.actionrl_upstream", Lang2ActReward(stage="actionrl", mode="upstream"))
REWARDS.add("lang2act.toolrl", Lang2ActReward(stage="toolrl"))
REWARDS.add("lang2act.toolrl_upstream", Lang2ActReward(stage="toolrl", mode="upstream"))
