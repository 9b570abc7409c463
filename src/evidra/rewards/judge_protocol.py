"""What a judge is given and what it answers, independent of any backend.

``JudgeItem`` in, ``Verdict`` out, behind the ``Judge`` protocol, and the strict parser of an
LLM judge's reply. The prompts that carry items to an LLM judge are registered in
``evidra.rewards.judge_prompts``; backends live in ``evidra.rewards.judge`` (``RuleJudge``) and
``evidra.rewards.judge_http`` (``OpenAIJudge``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from evidra.core.tagscan import find_blocks


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge. ``query``/``reference`` may be None to reproduce upstream payloads."""

    query: str | None
    reference: str | None
    generated: str


@dataclass(frozen=True)
class Verdict:
    """True/False when judged; None (unscored) with ``error`` saying why."""

    value: bool | None
    error: str | None = None

    @property
    def scored(self) -> bool:
        return self.value is not None

    def as_score(self) -> float | None:
        """1.0 / 0.0 for a judged item, None for an unscored one."""
        return None if self.value is None else float(self.value)


class Judge(Protocol):
    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]: ...


def judge_present(judge: Judge, items: Sequence[JudgeItem | None]) -> list[Verdict]:
    """A verdict for each of ``items``: the present ones judged in one batched call, a missing
    one (None: nothing to judge, such as an episode without an answer) ``Verdict(False)``.

    >>> class Yes:
    ...     def judge(self, items): return [Verdict(True) for _ in items]
    >>> [v.value for v in judge_present(Yes(), [JudgeItem("q", "a", "a"), None])]
    [True, False]
    """
    present = [item for item in items if item is not None]
    verdicts = iter(judge.judge(present) if present else [])
    return [next(verdicts) if item is not None else Verdict(False) for item in items]


# --- verdict parsing -------------------------------------------------------------------------


def parse_verdicts(text: str | None, n: int) -> list[Verdict]:
    """Strict parse of a judge reply that must hold exactly ``n`` ``<judge>`` tags.

    A tag counts only if its stripped content is ``true`` or ``false`` (any case): so
    ``<judge>not true</judge>`` is unscored, never True. A reply with the wrong number of
    tags is an error for every item of the batch: verdicts are never guessed by position.

    >>> parse_verdicts("<judge>True</judge><judge> false </judge>", 2)
    [Verdict(value=True, error=None), Verdict(value=False, error=None)]
    >>> parse_verdicts("<judge>not true</judge>", 1)[0].value is None
    True
    """
    # <judge>(.*?)</judge>, DOTALL | IGNORECASE
    tags = [b.body() for b in find_blocks(text or "", "<judge>", "</judge>", ignore_case=True)]
    if len(tags) != n:
        reason = f"expected {n} <judge> tags, got {len(tags)}"
        return [Verdict(None, reason) for _ in range(n)]
    out = []
    for content in tags:
        word = content.strip().lower()
        if word in ("true", "false"):
            out.append(Verdict(word == "true"))
        else:
            out.append(Verdict(None, f"unparseable verdict {content.strip()[:40]!r}"))
    return out
