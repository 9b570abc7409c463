"""Text primitives shared by the answer rewards and metrics of every paper.

Each source normalises answers its own way, and the differences change scores, so each
normaliser is kept separate and named after its source:

* ``normalize_squad``: SQuAD-style, EVisRAG's ``normalize_answer_qa`` (ASCII punctuation only).
* ``normalize_lat``: LAT's ``normalize_text`` (every Unicode punctuation/symbol, articles deleted).
* ``dpr_tokens``: DPR's ``SimpleTokenizer`` as used by VISA's answer accuracy (uncased, NFD).

Scores built on them: soft exact match and token recall (LAT Eq. 2-3), set F1 (EVisRAG
``f1_match``, Eq. 12), bag-of-words F1 (EVisRAG evaluation), substring EM, and VISA's
subsequence rule. All functions are pure and total: any string in, a value in range out.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter

import regex

_ASCII_PUNCT = frozenset(string.punctuation)
_SQUAD_ARTICLES = re.compile(r"\b(a|an|the)\b")
_LAT_ARTICLES = regex.compile(r"\b(a|an|the)\b")
_LAT_SPACES = regex.compile(r"\s+")
_LAT_PUNCT = regex.compile(r"[\p{P}\p{S}]")
_LAT_DIGIT_COMMA = regex.compile(r"(\d),(\d)")
_BRACES = re.compile(r"\{([^{}]+)\}")
_DPR_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", regex.IGNORECASE | regex.MULTILINE)

INSUFFICIENT_ANSWER = "insufficient to answer"  # EVisRAG's gold for unanswerable items (Eq. 12)
NO_RELEVANT_INFORMATION = "no relevant information"  # EVisRAG's per-image negative evidence (Eq. 11)
NO_ANSWER = "no answer"  # LAT / VISA unanswerable output ("No answer")


def normalize_squad(text: str) -> str:
    """SQuAD normalisation as in EVisRAG's ``normalize_answer_qa``.

    Lowercase, delete ASCII ``string.punctuation`` only (Unicode punctuation such as “ ” — stays),
    replace whole-word articles by a space, collapse whitespace.

    >>> normalize_squad("The U.S.A. -- a Country!")
    'usa country'
    >>> normalize_squad("Hello—World")
    'hello—world'
    """
    lowered = text.lower()
    no_punct = "".join(ch for ch in lowered if ch not in _ASCII_PUNCT)
    return " ".join(_SQUAD_ARTICLES.sub(" ", no_punct).split())


def normalize_lat(text: str, *, upstream: bool = True) -> str:
    """LAT's ``normalize_text``.

    Upstream order (default): lowercase, delete whole-word articles (to the empty string, so
    "A" becomes ""), collapse whitespace, delete every Unicode punctuation or symbol
    (``\\p{P}\\p{S}``), strip. Deleting punctuation *after* collapsing whitespace can leave double
    spaces ("1 - 2" -> "1  2"), which breaks the substring test of soft EM; ``upstream=False``
    deletes punctuation first and collapses whitespace last (used in paper mode).

    >>> normalize_lat("The Answer")
    'answer'
    >>> normalize_lat("$3.5 million")
    '35 million'
    >>> normalize_lat("1 - 2"), normalize_lat("1 - 2", upstream=False)
    ('1  2', '1 2')
    """
    lowered = text.lower()
    if not upstream:
        no_punct = _LAT_PUNCT.sub("", lowered)
        return " ".join(_LAT_ARTICLES.sub(" ", no_punct).split())
    out = _LAT_ARTICLES.sub("", lowered)
    out = _LAT_SPACES.sub(" ", out)
    out = _LAT_PUNCT.sub("", out)
    out = _LAT_DIGIT_COMMA.sub(r"\1\2", out)  # a no-op after punctuation removal, kept as upstream
    return out.strip()


def dpr_tokens(text: str) -> list[str]:
    """DPR ``SimpleTokenizer`` tokens, uncased and NFD-normalised (VISA answer accuracy).

    A token is a run of letters/digits/marks, or any single other non-space, non-control char.

    >>> dpr_tokens("Hello, World's 3.5%")
    ['hello', ',', 'world', "'", 's', '3', '.', '5', '%']
    """
    nfd = unicodedata.normalize("NFD", text)
    return [m.group().lower() for m in _DPR_TOKEN.finditer(nfd)]


def _contains_run(haystack: list[str], needle: list[str]) -> bool:
    """True if ``needle`` occurs contiguously in ``haystack`` (empty needle never matches)."""
    n = len(needle)
    if n == 0 or n > len(haystack):
        return False
    return any(haystack[i : i + n] == needle for i in range(len(haystack) - n + 1))


def visa_answer_match(pred: str, gold: str, max_len_diff: int = 20) -> bool:
    """VISA's answer accuracy: gold tokens a contiguous run of the prediction's or vice versa,
    and the raw strings differ in length by fewer than ``max_len_diff`` characters.

    >>> visa_answer_match("John Williams", "john williams")
    True
    >>> visa_answer_match("It was composed by the great John Williams in 1977", "John Williams")
    False
    """
    if abs(len(pred) - len(gold)) >= max_len_diff:
        return False
    p, g = dpr_tokens(pred), dpr_tokens(gold)
    return _contains_run(p, g) or _contains_run(g, p)


def braced_answer(text: str) -> str:
    """Tunnel Vision's extraction: the first ``{...}`` group, else the stripped text.

    >>> braced_answer("I end on {Red}."), braced_answer(" C3 ")
    ('Red', 'C3')
    """
    m = _BRACES.search(text)
    return (m.group(1) if m else text).strip()


def soft_exact_match(pred_norm: str, gold_norm: str, *, allow_empty: bool = True) -> bool:
    """LAT's soft EM (Eq. 3): one normalised string is a substring of the other.

    With ``allow_empty`` (upstream) an empty prediction is a substring of everything and
    matches; paper mode passes ``allow_empty=False``.

    >>> soft_exact_match("williams", "john williams")
    True
    >>> soft_exact_match("", "paris"), soft_exact_match("", "paris", allow_empty=False)
    (True, False)
    """
    if not allow_empty and (not pred_norm or not gold_norm):
        return False
    return gold_norm in pred_norm or pred_norm in gold_norm


def token_recall(pred_norm: str, gold_norm: str) -> float:
    """Word recall |a ∩ a_gt| / |a_gt| with multiset overlap (LAT Eq. 2).

    Upstream names this ``calculate_f1_reward``; it is recall. 0 if either side is empty.

    >>> token_recall("x x y", "x y y")
    0.6666666666666666
    """
    pred, gold = pred_norm.split(), gold_norm.split()
    if not pred or not gold:
        return 0.0
    common = Counter(pred) & Counter(gold)
    return sum(common.values()) / len(gold)


def set_f1(pred: str, gold: str) -> float:
    """EVisRAG's ``f1_match``: F1 over SQuAD-normalised token *sets* (duplicates ignored).

    >>> set_f1("insufficient to answer the question", "insufficient to answer")
    0.8571428571428571
    """
    p, g = set(normalize_squad(pred).split()), set(normalize_squad(gold).split())
    tp = len(p & g)
    if tp == 0:
        return 0.0
    precision, recall = tp / len(p), tp / len(g)
    return 2 * precision * recall / (precision + recall)


def bow_f1(pred: str, gold: str, *, eps: float = 0.0) -> float:
    """Bag-of-words F1 over SQuAD-normalised tokens (EVisRAG evaluation).

    EVisRAG's evaluation adds ``eps=1e-7`` to the denominator, so a perfect match scores
    0.99999995; paper mode uses ``eps=0``.

    >>> bow_f1("yes no", "yes")
    0.6666666666666666
    """
    p, g = normalize_squad(pred).split(), normalize_squad(gold).split()
    same = sum((Counter(p) & Counter(g)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(p), same / len(g)
    return (2 * precision * recall) / (precision + recall + eps)


def substring_em(pred: str, gold: str) -> float:
    """EVisRAG's ``em_match``: 1.0 iff normalised gold is a character substring of the
    normalised prediction (so "cat" matches "concatenate" and an empty gold always matches).

    >>> substring_em("category 5", "5")
    1.0
    """
    return 1.0 if normalize_squad(gold) in normalize_squad(pred) else 0.0


def exact_match(pred: str, gold: str) -> float:
    """Equality after SQuAD normalisation.

    >>> exact_match("The Beatles.", "beatles")
    1.0
    """
    return 1.0 if normalize_squad(pred) == normalize_squad(gold) else 0.0


def is_insufficient(text: str) -> bool:
    """True if an answer declines (EVisRAG): "insufficient to answer..." or "no relevant information".

    >>> is_insufficient("Insufficient to answer."), is_insufficient("Paris")
    (True, False)
    """
    norm = normalize_squad(text)
    return norm.startswith(INSUFFICIENT_ANSWER) or norm == NO_RELEVANT_INFORMATION


def is_no_answer(text: str) -> bool:
    """True if an answer says "No answer" (LAT / VISA unanswerable items), any case/punctuation.

    >>> is_no_answer("No Answer."), is_no_answer("I do not know")
    (True, False)
    """
    return NO_ANSWER in normalize_lat(text, upstream=False)
