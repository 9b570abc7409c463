"""Reward-hacking guards: checks beyond the papers, off by default (``reward.guards: true``; the
VRAG-RL and Lang2Act recipes turn them on for their offline rule-judge fallback).

The papers' rewards can be gamed by a policy that learns their blind spots, each measured on
hand-made completions (``tests/rewards/test_guards.py``):

* containment judges (Lang2Act, VRAG-RL, CAVE's rule judge) give full reward to an answer that
  lists many candidates, one of which contains the gold string;
* LAT's unanswerable items reward any answer that mentions "No answer", so the hedge
  "Clara Keller or No answer" earns full reward on both kinds of item;
* an offline step similarity rewards a step whose text copies the page's text layer, and a
  box that covers the whole page always contains the evidence.

A guard that trips caps the sample's reward at 0 (every component of RS-GRPO's scopes and
every per-turn credit too), so a hack is never better than an honest wrong answer; each trip
is counted in the components as ``guard:<name>`` (the trainer's metrics show how often).
Guards read only the parsed output and the sample: they never change a paper's equations.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from evidra.core.geometry import NORM_SCALE, area
from evidra.core.types import Box, CoordSpace, Page, Parsed, Sample
from evidra.rewards.reward import RewardResult

# phrases by which an answer declines; an answer that also names something else is a hedge
REFUSALS = (
    "no answer",
    "not answerable",
    "unanswerable",
    "cannot be answered",
    "cannot be determined",
    "can't be determined",
    "not mentioned",
    "not provided",
    "not stated",
    "not available",
    "unknown",
    "none of the",
)
_CONNECTIVES = frozenset({"or", "either", "and", "maybe", "perhaps", "possibly", "it", "is", "the", "answer"})
# a comma inside a number ("1,234,567") separates nothing
_SEPARATORS = re.compile(r"\s*(?:(?<!\d),|,(?!\d)|[;|/\n]|\bor\b)\s*", re.IGNORECASE)
_WORD = re.compile(r"\w+")


@dataclass(frozen=True)
class GuardConfig:
    """Which guards run and their limits (``reward:`` section of a recipe)."""

    guards: bool = False  # off: the papers' rewards unchanged
    max_answer_words: int = 32  # longer answers are dumps, not answers
    max_candidates: int = 3  # answers listing more alternatives (",", ";", "/", "or", lines)
    hedges: bool = True  # an answer that names something and also declines
    max_box_area: float = 0.8  # a cited box covering more of its page than this
    copy_min_words: int = 12  # steps at least this long are checked for copied page text
    max_copy_overlap: float = 0.8  # share of a step's 5-word shingles found in its page's text


def _words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def answer_candidates(answer: str) -> list[str]:
    """The alternatives an answer lists.

    >>> answer_candidates("Paris, Lyon or Nice")
    ['Paris', 'Lyon', 'Nice']
    >>> answer_candidates("$1,234,567,890")
    ['$1,234,567,890']
    """
    return [part for part in _SEPARATORS.split(answer.strip()) if _WORD.search(part)]


def is_hedge(answer: str) -> bool:
    """An answer that declines and names something else in the same breath.

    >>> is_hedge("Clara Keller or No answer"), is_hedge("No answer"), is_hedge("Clara Keller")
    (True, False, False)
    """
    text = answer.lower()
    hit = next((r for r in REFUSALS if r in text), None)
    if hit is None:
        return False
    rest = [w for w in _words(text.replace(hit, " ")) if w not in _CONNECTIVES]
    return bool(rest)


def box_share(box: Box, page: Page | None) -> float | None:
    """The share of its page a box covers (None when the box's frame size is unknown)."""
    if box.space is CoordSpace.NORM1000:
        return area(box) / (NORM_SCALE * NORM_SCALE)
    if box.space is CoordSpace.PAGE and page is not None:
        return area(box) / float(page.width * page.height)
    return None  # model-input pixels: the input size depends on the vision processor


def _shingles(words: Sequence[str], n: int = 5) -> set[tuple[str, ...]]:
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def copies_page(step_text: str, page: Page | None, cfg: GuardConfig) -> bool:
    """A long step whose word shingles mostly occur in the page's own text layer."""
    words = _words(step_text)
    if page is None or not page.words or len(words) < cfg.copy_min_words:
        return False
    page_shingles = _shingles(_words(" ".join(w.text for w in page.words)))
    mine = _shingles(words)
    return bool(mine) and len(mine & page_shingles) / len(mine) >= cfg.max_copy_overlap


def _page(sample: Sample, index: int | None) -> Page | None:
    if index is None or not 0 <= index < len(sample.pages):
        return None
    return sample.pages[index]


def _cited(parsed: Parsed) -> Iterable[tuple[Box, int | None]]:
    for step in parsed.steps:
        if step.box is not None:
            yield step.box, step.page_index
    if parsed.answer_box is not None:
        yield parsed.answer_box, parsed.answer_page


def tripped(parsed: Parsed, sample: Sample, cfg: GuardConfig) -> tuple[str, ...]:
    """The names of the guards ``parsed`` trips on ``sample`` (empty when guards are off)."""
    if not cfg.guards:
        return ()
    out = []
    answer = parsed.answer or ""
    if len(_words(answer)) > cfg.max_answer_words:
        out.append("long_answer")
    if len(answer_candidates(answer)) > cfg.max_candidates:
        out.append("many_candidates")
    if cfg.hedges and is_hedge(answer):
        out.append("hedge")
    shares = (box_share(b, _page(sample, i)) for b, i in _cited(parsed))
    if any(s is not None and s > cfg.max_box_area for s in shares):
        out.append("whole_page_box")
    if any(copies_page(s.text, _page(sample, s.page_index), cfg) for s in parsed.steps):
        out.append("copied_page_text")
    return tuple(out)


def guard(result: RewardResult, trips: Sequence[str]) -> RewardResult:
    """``result`` capped at 0 everywhere, with the trips counted, when any guard tripped."""
    if not trips or not result.scored:
        return result
    components = {**result.components, **{f"guard:{name}": 1.0 for name in trips}}
    return replace(
        result,
        total=min(result.total, 0.0),
        components=components,
        scopes={k: min(v, 0.0) for k, v in result.scopes.items()},
        turns=tuple(min(t, 0.0) for t in result.turns),
    )


def guarded(result: RewardResult, parsed: Parsed, sample: Sample, cfg: GuardConfig) -> RewardResult:
    """``result`` after the guards of ``cfg`` read ``parsed`` on ``sample``: how the trainer scores
    an episode when ``reward.guards`` is on (unchanged when it is off)."""
    return guard(result, tripped(parsed, sample, cfg))
