"""Short-answer match metrics after each benchmark's own normalisation.

ChartQA relaxed accuracy (numbers within 5% relative error), SlideVQA exact match and token F1
(its released ``normalize_answer``), and VisRAG's ``check_responses`` over VQA-eval
normalisation. Pure functions of strings; registered in ``evidra.eval.metrics``.
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Sequence

from evidra.metrics.text import INSUFFICIENT_ANSWER, NO_RELEVANT_INFORMATION, bow_f1, normalize_squad

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


# --- SlideVQA -----------------------------------------------------------------------------------

_NUMBER_WORDS = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
_SLIDEVQA_NUMBERS = {w: str(i) for i, w in enumerate(_NUMBER_WORDS)}
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


# Phrase rewrites of the released SlideVQA script, applied in this order as plain substring
# replacements (so "and" inside "band" becomes ","; reproduced as released).
_SLIDEVQA_REWRITES = (
    ("this is ", ""),
    ("it is ", ""),
    ("&", ","),
    ("and", ","),
    ("percent", ""),
    ("organisation", "organization"),
    ("because of", ""),
    ("because", ""),
    ("due to", ""),
    ("hours", "hrs"),
    ("minites", "min"),
)


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
    "arent": "aren't",
    "cant": "can't",
    "couldnt": "couldn't",
    "didnt": "didn't",
    "doesnt": "doesn't",
    "dont": "don't",
    "hadnt": "hadn't",
    "hasnt": "hasn't",
    "havent": "haven't",
    "isnt": "isn't",
    "shouldnt": "shouldn't",
    "wasnt": "wasn't",
    "werent": "weren't",
    "wont": "won't",
    "wouldnt": "wouldn't",
    "youre": "you're",
    "theyre": "they're",
    "thats": "that's",
    "theres": "there's",
    "whats": "what's",
    "wheres": "where's",
    "whos": "who's",
    "hes": "he's",
    "itll": "it'll",
    "youll": "you'll",
    "youve": "you've",
    "weve": "we've",
    "theyll": "they'll",
    "theyve": "they've",
    "wouldve": "would've",
    "shouldve": "should've",
    "couldve": "could've",
    "mightve": "might've",
    "mustve": "must've",
}
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


# ---- EVisRAG's evaluation ------------------------------------------------------------------

EVAL_REFUSALS = (NO_RELEVANT_INFORMATION, INSUFFICIENT_ANSWER, "insufficient to answer the question")


def evaluate_predictions(pred: str, golds: Sequence[str]) -> dict[str, float | bool]:
    """EVisRAG evaluation metrics of one prediction (``src/evisrag/eval.py``), max over golds.

    em: normalised equality; acc: gold token set a subset of the predicted set; f1: bag-of-words
    with +1e-7; hallucination: 0 iff exactly one side is "no relevant information". A gold with
    no token overlap is skipped entirely (so em stays 0 even for two empty strings). Unanswerable
    items are scored against ``EVAL_REFUSALS``.
    """
    metric: dict[str, float | bool] = {"is_valid_answer": False, "acc": 0, "em": 0, "f1": 0}
    metric.update({"math_equal": 0, "bertsc": 0, "hallucination": 0})
    p = normalize_squad(pred)
    for gold in golds:
        g = normalize_squad(gold)
        f1 = bow_f1(p, g, eps=1e-7)
        if f1 == 0.0:
            continue
        values = {
            "em": int(p == g),
            "acc": int(set(g.split()) <= set(p.split())),
            "f1": f1,
            "bertsc": 0,
            "hallucination": 0 if NO_RELEVANT_INFORMATION in (g, p) and g != p else 1,
        }
        for key, value in values.items():
            metric[key] = max(value, metric[key])
    return metric
