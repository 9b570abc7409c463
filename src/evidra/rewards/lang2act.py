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
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from evidra.errors import InvalidInputError
from evidra.rewards.base import REWARDS, RewardResult
from evidra.rewards.judge import Judge, JudgeItem, RuleJudge, Verdict
from evidra.rewards.judge import lang2act_user_message as build_judge_user_message
from evidra.types import Parsed, Sample, Trajectory

logger = logging.getLogger(__name__)

__all__ = ["build_judge_user_message"]

# The 7 tools of the curated toolbox listed in the prompt, plus compute_difference, which the
# released validator also accepts (ALLOWED_TOOLS has 8 names).
TOOLBOX: frozenset[str] = frozenset(
    {
        "locate_visual_element",
        "read_text_element",
        "read_numeric_value",
        "identify_entity_attribute",
        "compare_values",
        "compute_percentage",
        "infer_missing_information",
    }
)
ALLOWED_TOOLS_UPSTREAM: frozenset[str] = TOOLBOX | {"compute_difference"}
NUMERIC_TOOLS: frozenset[str] = frozenset({"compute_difference", "compute_percentage"})
DEFAULT_NUM_IMAGES = 3  # the released scorer's default; the trainer never passes num_images

_TOOL_OPEN = re.compile(r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']", re.IGNORECASE)
_TOOL_FULL = re.compile(
    r"<tool\s+name=[\"'](?P<name>[^\"']+)[\"']\s+args=[\"'](?P<args>[^\"']+)[\"']\s*>(?P<body>.*?)</tool>",
    re.DOTALL | re.IGNORECASE,
)
# Paper mode: attribute values delimited by a matching quote, so args="Row for 'France'" parse
# (the released pattern forbids both quote characters inside args and silently drops the call).
_TOOL_PAPER = re.compile(
    r"<tool\s+name=(?P<q1>[\"'])(?P<name>.*?)(?P=q1)\s+args=(?P<q2>[\"'])(?P<args>.*?)(?P=q2)\s*>(?P<body>.*?)</tool>",
    re.DOTALL | re.IGNORECASE,
)
_IMAGE_ID = re.compile(r"Image\s+(\d+)", re.IGNORECASE)
_ARGS_PREFIX = re.compile(r"Image\s+\d+\s*:")
_TAGS = ("think", "description", "answer")


@dataclass(frozen=True)
class StrictFormat:
    """Result of toolrl.py ``check_strict_format``: valid, error messages, stripped blocks."""

    valid: bool
    errors: tuple[str, ...] = ()
    parsed: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"valid": self.valid, "errors": list(self.errors), "parsed": dict(self.parsed)}


def _invalid(message: str) -> StrictFormat:
    return StrictFormat(False, (message,))


def check_strict_format(response: str) -> StrictFormat:
    """Each of ``<think>``, ``<description>``, ``<answer>`` opens and closes exactly once
    (case-insensitive), in that order, and every ``<tool name=..`` lies inside
    ``<description>``. Text outside the blocks is allowed.

    >>> check_strict_format("<think>x</think><description>d</description><answer>a</answer>").valid
    True
    """
    text = response if isinstance(response, str) else ""
    pos: dict[str, tuple[int, int]] = {}
    for tag in _TAGS:
        opens = list(re.finditer(f"<{tag}>", text, re.IGNORECASE))
        closes = list(re.finditer(f"</{tag}>", text, re.IGNORECASE))
        if len(opens) != 1 or len(closes) != 1:
            return _invalid(f"Tag <{tag}> must appear exactly once.")
        if opens[0].start() >= closes[0].start():
            return _invalid(f"Tag <{tag}> malformed.")
        pos[tag] = (opens[0].end(), closes[0].start())
    errors = []
    if pos["think"][1] > pos["description"][0]:
        errors.append("Order Error: <description> must follow <think>.")
    if pos["description"][1] > pos["answer"][0]:
        errors.append("Order Error: <answer> must follow <description>.")
    if errors:
        return StrictFormat(False, tuple(errors))
    blocks = {tag: text[start:end].strip() for tag, (start, end) in pos.items()}
    total, inside = len(_TOOL_OPEN.findall(text)), len(_TOOL_OPEN.findall(blocks["description"]))
    if total != inside:
        return _invalid(f"Tool Leakage: {total} total tools, but only {inside} inside <description>.")
    return StrictFormat(True, (), blocks)


@dataclass(frozen=True)
class ToolCall:
    name: str
    args: str
    body: str


def parse_tools(description: str) -> list[ToolCall]:
    """Well-formed ``<tool name=".." args="..">body</tool>`` calls (quotes " or ', non-empty args)."""
    return [
        ToolCall(m.group("name").strip(), m.group("args").strip(), m.group("body").strip())
        for m in _TOOL_FULL.finditer(description)
    ]


def _tool_penalties(
    tool: ToolCall, selected: set[int], num_images: int, allowed: Collection[str]
) -> list[float]:
    """Deductions for one tool, in the released order (subtracted one by one, so the float
    result matches bit for bit: 1 - 0.2 - 0.2 is 0.6000000000000001)."""
    if tool.name not in allowed:
        return [0.3]
    out = []
    if tool.name in NUMERIC_TOOLS:
        if not tool.args:
            out.append(0.2)
    else:
        if not _ARGS_PREFIX.match(tool.args):
            out.append(0.2)
        ids = {int(x) for x in _IMAGE_ID.findall(tool.args)}
        if not ids:
            out.append(0.2)
        for image_id in ids:
            if not 1 <= image_id <= num_images:
                out.append(0.5)
            elif image_id not in selected:
                out.append(0.1)
    if not tool.body:
        out.append(0.1)
    return out


def validate_tool_content(
    description: str, think_content: str, num_images: int, allowed: Collection[str] = ALLOWED_TOOLS_UPSTREAM
) -> float:
    """toolrl.py's graded tool score in [0, 1]: start at 1 and deduct per tool (unknown -0.3;
    args not ``Image k:`` -0.2; no image id -0.2; id out of range -0.5; id not selected in
    ``<think>`` -0.1; empty body -0.1), -0.1 for more than 8 tools. No tools scores 0.

    >>> validate_tool_content('<tool name="read_text_element" args="Image 4: x">y</tool>', "", 3)
    0.5
    """
    tools = parse_tools(description)
    if not tools:
        return 0.0
    selected = {int(x) for x in _IMAGE_ID.findall(think_content)}
    score = 1.0
    for tool in tools:
        for penalty in _tool_penalties(tool, selected, num_images, allowed):
            score -= penalty
    if len(tools) > 8:
        score -= 0.1
    return max(0.0, score)


def tool_validity(response: str, num_images: int, toolbox: Collection[str] = TOOLBOX) -> float:
    """Lang2Act Eq. 13, ``I_valid(z | T_box)``: 1.0 iff the strict format holds, there is at
    least one tool, every ``<tool`` opening is a well-formed call of a toolbox tool, and every
    non-numeric tool's args start ``Image k:`` with all referenced ids in 1..num_images."""
    fmt = check_strict_format(response)
    if not fmt.valid:
        return 0.0
    description = fmt.parsed["description"]
    tools = [
        ToolCall(m.group("name").strip(), m.group("args").strip(), m.group("body").strip())
        for m in _TOOL_PAPER.finditer(description)
    ]
    if not tools or len(tools) != len(_TOOL_OPEN.findall(description)):
        return 0.0
    for tool in tools:
        if tool.name not in toolbox:
            return 0.0
        if tool.name in NUMERIC_TOOLS:
            continue
        ids = [int(x) for x in _IMAGE_ID.findall(tool.args)]
        if not _ARGS_PREFIX.match(tool.args) or not ids or not all(1 <= i <= num_images for i in ids):
            return 0.0
    return 1.0


def parse_generation(response: str) -> dict[str, str | None]:
    """actionrl.py: first non-greedy ``<think>``/``<description>``/``<answer>`` (IGNORECASE), stripped."""
    out: dict[str, str | None] = {}
    for tag in _TAGS:
        match = re.search(f"<{tag}>(.*?)</{tag}>", response, re.DOTALL | re.IGNORECASE)
        out[tag] = match.group(1).strip() if match else None
    return out


def actionrl_format_score(response: str) -> float:
    """Stage-1 format: 1.0 iff all three blocks exist with non-empty content (order unchecked)."""
    parsed = parse_generation(response if isinstance(response, str) else "")
    return 1.0 if all(parsed[tag] for tag in _TAGS) else 0.0


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
    ) -> None:
        if stage not in ("actionrl", "toolrl") or mode not in ("paper", "upstream"):
            raise InvalidInputError(
                f"Lang2Act stage must be 'actionrl' or 'toolrl' and mode 'paper' or 'upstream', "
                f"got {stage!r}, {mode!r}"
            )
        self.stage, self.mode, self.alpha, self.beta = stage, mode, alpha, beta
        self.judge = judge if judge is not None else RuleJudge()
        self.toolbox = frozenset(toolbox)
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
            answer or None, float(fmt.valid), tool_validity(text, num_images, self.toolbox), False
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
            total = round(self.alpha * answer + self.beta * p.format, 6)
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
