"""LLM-as-judge answer scoring (VRAG-RL Eq. 11, Lang2Act Eq. 2 / Eq. 14) behind one protocol.

A judge maps ``JudgeItem``s (query, reference, generated answer) to ``Verdict``s. A verdict is
True, False or None: None means *unscored* (endpoint unreachable, reply unparseable, wrong
number of verdicts in a batch) and carries the reason. Reward wrappers turn None into
``RewardResult.unscored``; nothing here guesses a 0 or a 1.

Backends:

* ``RuleJudge``: normalized exact / containment match, offline and deterministic.
* ``OpenAIJudge``: any OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint
  (vLLM, SGLang, hosted) through ``evidra.openai.client``, async with bounded concurrency,
  timeouts, bounded backoff retries and a cache keyed by ``(model, prompt)``. The released code
  retried forever (VRAG-RL) or scored failures as 0 (Lang2Act); neither is reproduced.

Prompts: each paper's is a registered ``JudgePrompt`` (``evidra.rewards.judge_prompts``:
vragrl, lang2act, cave). The released, lenient reply parsers are kept for replay next to their
rewards: ``vragrl.parse_judge_response_upstream`` and ``lang2act.parse_judge_batch_upstream``.

Layout: items, verdicts and the strict reply parser are in ``judge_protocol``; the prompts in
``judge_prompts``; the HTTP backend and its caches in ``judge_http``; this module holds ``RuleJudge``.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evidra.metrics.text import braced_answer
from evidra.rewards.judge_protocol import JudgeItem, Verdict

# --- rule-based judge ------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation (ASCII and Unicode) and articles, collapse whitespace."""
    lowered = unicodedata.normalize("NFKC", text).lower()
    kept = "".join(
        " " if (ch in string.punctuation or unicodedata.category(ch).startswith("P")) else ch
        for ch in lowered
    )
    return " ".join(_ARTICLES.sub(" ", kept).split())


RuleMatch = Literal["exact", "contains", "stripped_lower", "braced"]


@dataclass(frozen=True)
class RuleJudge:
    """Offline judge: ``exact`` (normalized equality), ``contains`` (normalized reference
    inside the generated answer, the VRAG-RL prompt's "may contain additional information"),
    ``stripped_lower`` (``strip().lower()`` equality: the conformance stub judge), or ``braced``
    (the first ``{...}`` of the answer, else all of it, equal to the reference up to case: the
    Tunnel-Vision / TRACER-style accuracy, where a one-letter answer must not be found by
    containment).
    An item without a reference is unscored.
    """

    match: RuleMatch = "contains"

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [self._one(item) for item in items]

    def _one(self, item: JudgeItem) -> Verdict:
        if item.reference is None:
            return Verdict(None, "no reference answer")
        if self.match == "stripped_lower":
            return Verdict(item.generated.strip().lower() == item.reference.strip().lower())
        if self.match == "braced":
            return Verdict(braced_answer(item.generated).casefold() == item.reference.strip().casefold())
        gen, ref = normalize_answer(item.generated), normalize_answer(item.reference)
        if not ref:
            return Verdict(None, "reference answer is empty after normalization")
        if self.match == "exact":
            return Verdict(gen == ref)
        return Verdict(f" {ref} " in f" {gen} ")
