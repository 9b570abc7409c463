"""MMLongBench-Doc's answer scoring: ``eval_score`` per answer format, and Acc / F1 over a set.

Reproduces the released scorer's cleaning and per-format rules (Int, Float, Str, None, List).
Nothing here calls ``eval``: list answers are parsed with ``ast.literal_eval`` / ``json`` and
fall back to a plain string. Registered in ``evidra.eval.metrics``.
"""

from __future__ import annotations

import ast
import json
import math
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.metrics.anls import _anls_value, normalized_levenshtein
from evidra.metrics.qa import _to_float


def mmlongbench_clean(text: object) -> str:
    """Lowercase, strip, drop ``(...)``, surrounding quotes, a leading ``$``, a trailing ``%``.

    (The released code's mile/million stripping discards its result, so it is a no-op here too.)

    >>> mmlongbench_clean(' "$1,200 (approx.)" ')
    '1,200'
    """
    s = str(text).lower().strip()
    s = re.sub(r"\s*\([^)]*\)", "", s).strip()
    s = re.sub(r"^['\"]|['\"]$", "", s).strip()
    return s.lstrip("$").strip().rstrip("%").strip()


_EXACT_PATTERNS = (
    re.compile(r"\b\d+(-\d+|\s\d+)?\b"),  # phone-like numbers
    re.compile(r"\b\d{4}[-\s]\d{2}[-\s]\d{2}\b"),  # YYYY-MM-DD
    re.compile(r"\b\d{4}[-\s]\d{2}\b"),  # YYYY-MM
    re.compile(r"[a-zA-Z0-9._%+-]+@[a-zA-Z0-9.-]+\.[a-zA-Z]{2,}"),  # e-mail
)


def mmlongbench_is_exact_type(s: str) -> bool:
    """Answers MMLongBench-Doc scores by exact equality instead of ANLS."""
    if "https://" in s or s.endswith((".py", "ipynb")) or s.startswith("page"):
        return True
    if "a.m." in s or "p.m." in s:
        return True
    return any(p.fullmatch(s) for p in _EXACT_PATTERNS)


def _decimals(x: float) -> int:
    text = str(x)
    return len(text.split(".")[-1]) if "." in text else 3


def _float_equal(gold: float, pred: float) -> bool:
    """Candidates gold/100, gold, gold*100; isclose(rel 1%) or equal after rounding to
    ``max(min(decimals), 2)`` places."""
    for cand in (gold / 100, gold, gold * 100):
        if math.isclose(cand, pred, rel_tol=0.01):
            return True
        try:
            places = max(min(_decimals(pred), _decimals(cand)), 2)
            if round(pred, places) == round(cand, places):
                return True
        except (OverflowError, ValueError):
            continue
    return False


def _mmlb_anls(gold: str, pred: str) -> float:
    return _anls_value(normalized_levenshtein(gold, pred), 0.5, "zero")


def _as_list(value: object) -> list[object]:
    """A list answer: parse ``"[...]"`` safely (literal_eval, then JSON); scalars are wrapped."""
    if isinstance(value, str) and value.startswith("["):
        for parse in (ast.literal_eval, json.loads):
            try:
                with warnings.catch_warnings():  # model text like "[1st]" is data, not code to lint
                    warnings.simplefilter("ignore", SyntaxWarning)
                    parsed = parse(value)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(parsed, (list, tuple)):
                return list(parsed)
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _score_list(gold: object, pred: object) -> float:
    golds, preds = _as_list(gold), _as_list(pred)
    if len(golds) != len(preds):
        return 0.0
    if not golds:
        return 1.0
    g = sorted(mmlongbench_clean(x) for x in golds)
    p = sorted(mmlongbench_clean(x) for x in preds)
    if _to_float(g[0]) is not None or mmlongbench_is_exact_type(g[0]):
        return 1.0 if "-".join(g) == "-".join(p) else 0.0
    return min(_mmlb_anls(a, b) for a, b in zip(g, p, strict=True))


# ``Sample.answer_type`` -> MMLongBench's ``answer_format`` spelling (its loader reads the inverse)
MMLONGBENCH_FORMATS: dict[str, str] = {
    "int": "Int",
    "float": "Float",
    "str": "Str",
    "list": "List",
    "none": "None",
}


def mmlongbench_score(gold: object, pred: object, answer_format: str) -> float:
    """MMLongBench-Doc ``eval_score`` for ``Int``, ``Float``, ``Str``, ``None`` and ``List``.

    Unparseable numbers score 0 (the released code raised on an unparseable Float gold).

    >>> mmlongbench_score("12", "12.0", "Int")
    1.0
    >>> mmlongbench_score("0.25", "25%", "Float")
    1.0
    >>> mmlongbench_score("['a', 'b']", "['B', 'A']", "List")
    1.0
    """
    if answer_format == "Int":
        try:
            return 1.0 if int(str(gold).strip()) == int(float(str(pred).strip())) else 0.0
        except (ValueError, OverflowError):
            return 0.0
    if answer_format == "Float":
        gold_f, pred_f = _to_float(mmlongbench_clean(gold)), _to_float(mmlongbench_clean(pred))
        if gold_f is None or pred_f is None or not (math.isfinite(gold_f) and math.isfinite(pred_f)):
            return 0.0
        return 1.0 if _float_equal(gold_f, pred_f) else 0.0
    if answer_format in ("Str", "None"):
        g, p = mmlongbench_clean(gold), mmlongbench_clean(pred)
        if mmlongbench_is_exact_type(g):
            return 1.0 if g == p else 0.0
        return _mmlb_anls(g, p)
    if answer_format == "List":
        return _score_list(gold, pred)
    raise InvalidInputError(
        f"unknown MMLongBench answer_format {answer_format!r}; use Int, Float, Str, None or List"
    )


NOT_ANSWERABLE = "Not answerable"


@dataclass(frozen=True)
class ScoredAnswer:
    """One MMLongBench-Doc item after scoring: gold answer, extracted prediction, score."""

    answer: str
    pred: str
    score: float


def mmlongbench_acc_f1(items: Sequence[ScoredAnswer]) -> tuple[float, float]:
    """Acc = mean score; F1 from R = sum(score | answerable) / #answerable and
    P = sum(score | answerable) / #(pred != "Not answerable"). Empty parts give 0.

    >>> mmlongbench_acc_f1([ScoredAnswer("a", "a", 1.0), ScoredAnswer(NOT_ANSWERABLE, "x", 0.0)])
    (0.5, 0.6666666666666666)
    """
    if not items:
        return 0.0, 0.0
    acc = sum(i.score for i in items) / len(items)
    answerable = [i for i in items if i.answer != NOT_ANSWERABLE]
    predicted = [i for i in items if i.pred != NOT_ANSWERABLE]
    if not answerable or not predicted:
        return acc, 0.0
    hit = sum(i.score for i in answerable)
    recall, precision = hit / len(answerable), hit / len(predicted)
    f1 = 2 * recall * precision / (recall + precision) if recall + precision > 0 else 0.0
    return acc, f1
