"""LLM-as-judge answer scoring (VRAG-RL Eq. 11, Lang2Act Eq. 2 / Eq. 14) behind one protocol.

A judge maps ``JudgeItem``s (query, reference, generated answer) to ``Verdict``s. A verdict is
True, False or None: None means *unscored* (endpoint unreachable, reply unparseable, wrong
number of verdicts in a batch) and carries the reason. Reward wrappers turn None into
``RewardResult.unscored``; nothing here guesses a 0 or a 1.

Backends:

* ``RuleJudge``: normalized exact / containment match, offline and deterministic.
* ``OpenAIJudge``: any OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint
  (vLLM, SGLang, hosted) through ``evidra.openai_client``, async with bounded concurrency,
  timeouts, bounded backoff retries and a cache keyed by ``(model, prompt)``. The released code
  retried forever (VRAG-RL) or scored failures as 0 (Lang2Act); neither is reproduced.

Prompts: VRAG-RL sends one item as a single user message (``VRAGRL_JUDGE_TEMPLATE``);
Lang2Act sends batches as system prompt + one user message (``lang2act_user_message``).
The verbatim texts are those of the released rm.py / toolrl.py. The
released, lenient reply parsers are kept for replay next to their rewards:
``vragrl.parse_judge_response_upstream`` and ``lang2act.parse_judge_batch_upstream``.

Layout: items, verdicts, prompts and the strict reply parser are in ``judge_protocol``; the
HTTP backend and its caches in ``judge_http``; this module holds ``RuleJudge`` and re-exports
the rest, so ``evidra.rewards.judge`` stays the one import path.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

# Re-exports: callers import every judge name from this module, wherever it is defined.
from evidra.rewards.judge_http import DiskCache as DiskCache
from evidra.rewards.judge_http import HttpJudgeConfig as HttpJudgeConfig
from evidra.rewards.judge_http import JudgeCache as JudgeCache
from evidra.rewards.judge_http import JudgeStats as JudgeStats
from evidra.rewards.judge_http import MemoryCache as MemoryCache
from evidra.rewards.judge_http import OpenAIJudge as OpenAIJudge
from evidra.rewards.judge_http import cache_key as cache_key
from evidra.rewards.judge_protocol import _PLACEHOLDER as _PLACEHOLDER
from evidra.rewards.judge_protocol import LANG2ACT_JUDGE_SYSTEM_PROMPT as LANG2ACT_JUDGE_SYSTEM_PROMPT
from evidra.rewards.judge_protocol import VRAGRL_JUDGE_TEMPLATE as VRAGRL_JUDGE_TEMPLATE
from evidra.rewards.judge_protocol import Judge as Judge
from evidra.rewards.judge_protocol import JudgeItem as JudgeItem
from evidra.rewards.judge_protocol import PromptStyle as PromptStyle
from evidra.rewards.judge_protocol import Verdict as Verdict
from evidra.rewards.judge_protocol import build_messages as build_messages
from evidra.rewards.judge_protocol import lang2act_user_message as lang2act_user_message
from evidra.rewards.judge_protocol import parse_verdicts as parse_verdicts
from evidra.rewards.judge_protocol import vragrl_judge_prompt as vragrl_judge_prompt
from evidra.rewards.text import braced_answer

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
