"""Official answer metrics of the document-VQA benchmarks (reference/BENCHMARKS.md §2-§9).

Every metric is a pure function of strings with its benchmark's own normalisation, and is
registered in ``METRICS`` with its metadata (higher_is_better, aggregation), so evaluation
tables pick metrics by name. Nothing here calls ``eval``: MMLongBench-Doc's list answers are
parsed with ``ast.literal_eval`` / ``json`` and fall back to a plain string.
"""

from __future__ import annotations

import ast
import json
import math
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from evidra.errors import InvalidInputError
from evidra.registry import Registry


def levenshtein(a: str, b: str) -> int:
    """Edit distance (insert, delete, substitute all cost 1).

    Two-row dynamic programme: O(len(a) * len(b)) time, O(min(len)) memory. Pure Python runs
    about 3 million cell updates per second (measured: 0.8 ms for two 50-character strings,
    80 ms for 500 x 500): fine for short answers, too slow for whole pages.

    >>> levenshtein("kitten", "sitting")
    3
    """
    if len(a) < len(b):
        a, b = b, a
    if not b:
        return len(a)
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, start=1):
        current = [i]
        for j, cb in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def normalized_levenshtein(a: str, b: str) -> float:
    """``lev(a, b) / max(len)``; 0.0 for two empty strings."""
    longest = max(len(a), len(b))
    return 0.0 if longest == 0 else levenshtein(a, b) / longest


# --- ANLS (DocVQA, InfographicVQA, MP-DocVQA, MMLongBench-Doc) --------------------------------


def normalize_docvqa(text: str) -> str:
    """DocVQA ANLS normalisation: lowercase, strip, collapse whitespace.

    >>> normalize_docvqa("  The   Answer ")
    'the answer'
    """
    return " ".join(text.lower().split())


Edge = Literal["keep", "zero"]


def _anls_value(nl: float, threshold: float, edge: Edge) -> float:
    """``1 - NL`` below the threshold. At exactly the threshold lmms-eval keeps the score
    (``edge="keep"``), MMLongBench-Doc zeroes it (``edge="zero"``)."""
    if nl < threshold or (edge == "keep" and nl == threshold):
        return 1.0 - nl
    return 0.0


def anls(prediction: str, answers: Sequence[str], threshold: float = 0.5, edge: Edge = "keep") -> float:
    """Per-question ANLS: max over gold answers of ``1 - NL`` if ``NL < threshold`` else 0.

    >>> anls("Paris", ["paris ", "Lyon"])
    1.0
    >>> anls("ab", ["abcd"])  # NL = 0.5 exactly: kept (lmms-eval) ...
    0.5
    >>> anls("ab", ["abcd"], edge="zero")  # ... or zeroed (MMLongBench-Doc)
    0.0
    """
    pred = normalize_docvqa(prediction)
    scores = [
        _anls_value(normalized_levenshtein(pred, normalize_docvqa(a)), threshold, edge) for a in answers
    ]
    return max(scores, default=0.0)


def anls_vrag_upstream(gold_labels: Sequence[str], prediction: str, threshold: float = 0.7) -> float:
    """VRAG-RL vrag.py ``calculate_anls``: no lowercasing or stripping, ``NL < threshold``.

    >>> round(anls_vrag_upstream(["Less well-off"], "less well off", 0.5), 4)
    0.8462
    """
    if not gold_labels:
        raise InvalidInputError(
            "anls_vrag_upstream needs at least one gold label (upstream max() of nothing)"
        )
    return max(_anls_value(normalized_levenshtein(prediction, g), threshold, "zero") for g in gold_labels)


# --- ChartQA relaxed accuracy -------------------------------------------------------------------


def _to_float(text: str) -> float | None:
    try:
        if text.endswith("%"):
            return float(text.rstrip("%")) / 100.0
        return float(text)
    except ValueError:
        return None


def relaxed_accuracy(prediction: str, target: str, tolerance: float = 0.05) -> float:
    """ChartQA: numbers within ``tolerance`` relative error, else case-insensitive equality.

    A trailing ``%`` divides by 100; a zero target falls back to string equality.

    >>> relaxed_accuracy("10.4", "10")
    1.0
    >>> relaxed_accuracy("52%", "0.5")
    1.0
    >>> relaxed_accuracy("Yes", "yes")
    1.0
    """
    pred, gold = _to_float(prediction), _to_float(target)
    if pred is not None and gold:
        return 1.0 if abs(pred - gold) / abs(gold) <= tolerance else 0.0
    return 1.0 if prediction.lower() == target.lower() else 0.0


# --- MMLongBench-Doc -----------------------------------------------------------------------------


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


def _as_list(value: object) -> list[Any]:
    """A list answer: parse ``"[...]"`` safely (literal_eval, then JSON); scalars are wrapped."""
    if isinstance(value, str) and value.startswith("["):
        for parse in (ast.literal_eval, json.loads):
            try:
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


# --- SlideVQA -----------------------------------------------------------------------------------

_NUMBER_WORDS = [
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
]  # fmt: skip
_SLIDEVQA_NUMBERS = {w: str(i) for i, w in enumerate(_NUMBER_WORDS)}
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


# Phrase rewrites of the released SlideVQA script, applied in this order as plain substring
# replacements (so "and" inside "band" becomes ","; reproduced as released).
_SLIDEVQA_REWRITES = (
    ("this is ", ""), ("it is ", ""), ("&", ","), ("and", ","), ("percent", ""),
    ("organisation", "organization"), ("because of", ""), ("because", ""), ("due to", ""),
    ("hours", "hrs"), ("minites", "min"),
)  # fmt: skip


def _remove_unit(text: str, question: str) -> str:
    """Delete (as a substring) the word after "how many" / "which" in the question.

    The question is not lowercased, as released, so a capitalised "How many" at the start of
    a question removes nothing. A cue with no word after it is skipped (released: IndexError).
    """
    for cue in ("how many", "which"):
        idx = question.find(cue)
        words = question[idx + len(cue) :].split() if idx >= 0 else []
        if words:
            text = text.replace(words[0], "")
    return text


def normalize_slidevqa(s: str, question: str = "") -> str:
    """SlideVQA ``normalize_answer(s, question)``: lowercase, phrase rewrites, unit removal,
    ASCII punctuation and articles removed, a leading "yes"/"no" prefix keeps only the first
    token, whitespace collapsed, number words 0-19 to digits.

    >>> normalize_slidevqa("Three slides", "how many slides are there?")
    '3'
    >>> normalize_slidevqa("Yes, it is.", "Is it?")
    'yes'
    """
    text = s.lower()
    for old, new in _SLIDEVQA_REWRITES:
        text = text.replace(old, new)
    text = _ARTICLES.sub(" ", _remove_unit(text, question).translate(_PUNCT))
    if text[:3] == "yes" or text[:2] == "no":
        text = text.split()[0]
    return " ".join(_SLIDEVQA_NUMBERS.get(t, t) for t in text.split())


def token_f1(pred_tokens: Sequence[str], gold_tokens: Sequence[str]) -> float:
    """SQuAD bag-of-words F1 (multiset overlap); 0.0 when nothing overlaps (both empty too)."""
    overlap = sum((Counter(pred_tokens) & Counter(gold_tokens)).values())
    if overlap == 0:
        return 0.0
    precision, recall = overlap / len(pred_tokens), overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def slidevqa_em(prediction: str, answer: str, question: str = "") -> float:
    """SlideVQA QA exact match: equal normalized token lists that share at least one token
    (the released script skips items without overlap, so two empty answers score 0)."""
    pred, gold = (
        normalize_slidevqa(prediction, question).split(),
        normalize_slidevqa(answer, question).split(),
    )
    return 1.0 if pred == gold and pred else 0.0


def slidevqa_f1(prediction: str, answer: str, question: str = "") -> float:
    """SlideVQA QA token F1 after ``normalize_slidevqa``.

    >>> slidevqa_f1("the red car", "red bus")
    0.5
    """
    return token_f1(
        normalize_slidevqa(prediction, question).split(), normalize_slidevqa(answer, question).split()
    )


# --- VQA-style normalisation and VisRAG's check_responses ----------------------------------------

_VQA_NUMBERS = {w: str(i) for i, w in enumerate(_NUMBER_WORDS[:11])}
_VQA_NUMBERS["none"] = "0"
# A common subset of the VQA-eval contraction map.
_CONTRACTIONS = {
    "arent": "aren't", "cant": "can't", "couldnt": "couldn't", "didnt": "didn't", "doesnt": "doesn't",
    "dont": "don't", "hadnt": "hadn't", "hasnt": "hasn't", "havent": "haven't", "isnt": "isn't",
    "shouldnt": "shouldn't", "wasnt": "wasn't", "werent": "weren't", "wont": "won't",
    "wouldnt": "wouldn't", "youre": "you're", "theyre": "they're", "thats": "that's", "theres": "there's",
    "whats": "what's", "wheres": "where's", "whos": "who's", "hes": "he's", "itll": "it'll",
    "youll": "you'll", "youve": "you've", "weve": "we've", "theyll": "they'll", "theyve": "they've",
    "wouldve": "would've", "shouldve": "should've", "couldve": "could've", "mightve": "might've",
    "mustve": "must've",
}  # fmt: skip
_VQA_PUNCT = [
    ";",
    "/",
    "[",
    "]",
    '"',
    "{",
    "}",
    "(",
    ")",
    "=",
    "+",
    "\\",
    "_",
    "-",
    ">",
    "<",
    "@",
    "`",
    ",",
    "?",
    "!",
]
_PERIOD_STRIP = re.compile(r"(?!<=\d)(\.)(?!\d)")
_COMMA_STRIP = re.compile(r"(\d)(,)(\d)")


def normalize_vqa(text: str) -> str:
    """VQA-eval ``processPunctuation`` + ``processDigitArticle``: punctuation removed (a
    decimal point between digits is kept, "1,000" becomes "1000"), lowercase, number words
    0-10 to digits, articles dropped, common contractions restored.

    >>> normalize_vqa("The Two dogs.")
    '2 dogs'
    """
    out = text.replace("\n", " ").replace("\t", " ").strip().lower()
    for p in _VQA_PUNCT:
        if (p + " " in out or " " + p in out) or _COMMA_STRIP.search(out) is not None:
            out = out.replace(p, "")
        else:
            out = out.replace(p, " ")
    out = _PERIOD_STRIP.sub("", out)
    words = [_VQA_NUMBERS.get(w, w) for w in out.split() if w not in ("a", "an", "the")]
    return " ".join(_CONTRACTIONS.get(w, w) for w in words)


def _drop_one_sided_percent(pred: str, gold: str) -> tuple[str, str]:
    if pred.endswith("%") != gold.endswith("%"):
        return pred.rstrip("%").strip(), gold.rstrip("%").strip()
    return pred, gold


def _first_letter(text: str) -> str:
    match = re.search(r"[A-Za-z]", text)
    return match.group(0).upper() if match else ""


def visrag_accuracy(prediction: str, answers: Sequence[str], dataset: str = "") -> float:
    """VisRAG ``check_responses``: exact match after ``normalize_vqa`` against any answer;
    ChartQA/PlotQA also accept numbers within 5% (non-zero answer); ArxivQA compares the
    first option letter; a ``%`` present on one side only is dropped.

    >>> visrag_accuracy("Two", ["2"])
    1.0
    >>> visrag_accuracy("10.3%", ["10"], dataset="chartqa")
    1.0
    """
    name = dataset.lower()
    for answer in answers:
        if name == "arxivqa":
            if _first_letter(prediction) and _first_letter(prediction) == _first_letter(answer):
                return 1.0
            continue
        pred, gold = _drop_one_sided_percent(normalize_vqa(prediction), normalize_vqa(answer))
        if pred == gold:
            return 1.0
        if name in ("chartqa", "plotqa"):
            p, g = _to_float(pred.rstrip("%")), _to_float(gold.rstrip("%"))
            if p is not None and g and math.isfinite(g) and abs(p - g) / abs(g) <= 0.05:
                return 1.0
    return 0.0


# --- registry -------------------------------------------------------------------------------------

Aggregation = Literal["mean", "f1"]


@dataclass(frozen=True)
class Metric:
    """A per-item metric plus how to report it over a dataset."""

    fn: Callable[..., float]
    higher_is_better: bool = True
    aggregation: Aggregation = "mean"
    benchmark: str = ""


METRICS: Registry[Metric] = Registry("metric")
METRICS.add("anls", Metric(anls, benchmark="DocVQA/InfoVQA/MP-DocVQA (lmms-eval edge)"))
METRICS.add("anls_mmlongbench", Metric(lambda p, a: anls(p, a, edge="zero"), benchmark="MMLongBench-Doc"))
METRICS.add("anls_vrag_upstream", Metric(anls_vrag_upstream, benchmark="VRAG-RL vrag.py"))
METRICS.add("relaxed_accuracy", Metric(relaxed_accuracy, benchmark="ChartQA"))
METRICS.add("mmlongbench_score", Metric(mmlongbench_score, aggregation="f1", benchmark="MMLongBench-Doc"))
METRICS.add("slidevqa_em", Metric(slidevqa_em, benchmark="SlideVQA"))
METRICS.add("slidevqa_f1", Metric(slidevqa_f1, benchmark="SlideVQA"))
METRICS.add("visrag_accuracy", Metric(visrag_accuracy, benchmark="VisRAG eval sets"))
METRICS.add("levenshtein", Metric(lambda a, b: float(levenshtein(a, b)), higher_is_better=False))
