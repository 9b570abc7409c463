"""What a judge is given and what it answers, independent of any backend.

``JudgeItem`` in, ``Verdict`` out, behind the ``Judge`` protocol; the verbatim prompts that
carry items to an LLM judge (VRAG-RL Eq. 11: one item per user message; Lang2Act Eq. 2 /
Eq. 14: batches as system prompt + one user message), and the strict parser of its reply.
The texts are the released rm.py / toolrl.py prompts, verbatim. Backends live in
``evidra.rewards.judge`` (``RuleJudge``) and ``evidra.rewards.judge_http`` (``OpenAIJudge``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from evidra.errors import InvalidInputError
from evidra.tagscan import find_blocks


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


# --- prompts (verbatim from the released code, see conformance/README.md) -------------------

VRAGRL_JUDGE_TEMPLATE = """You are an expert evaluation system for a question answering chatbot.

You are given the following information:
- the query
- a generated answer
- a reference answer

Your task is to evaluate the correctness of the generated answer.

## Query
{query}

## Reference Answer
{reference_answer}

## Generated Answer
{generated_answer}

Your response should be formatted as following:
<judge>True or False</judge>

If the generated answer is correct, please set "judge" to True. Otherwise, please set "judge" to False.

Please note that the generated answer may contain additional information beyond the reference answer."""

LANG2ACT_JUDGE_SYSTEM_PROMPT = """You are an automated evaluation system. Your ONLY task is to compare a 'Generated Answer' to a 'Reference Answer' and determine if they are equivalent.
Follow these rules STRICTLY:
1.  For EACH item you evaluate, you MUST output EXACTLY ONE `<judge>` tag.
2.  Inside the tag, write 'True' if the generated answer is correct or equivalent to the reference.
3.  Inside the tag, write 'False' if the generated answer is incorrect, incomplete, or different from the reference.
4.  Your entire response MUST consist ONLY of a series of `<judge>` tags, one for each item.
5.  ABSOLUTELY DO NOT provide any text, explanation, reasoning, markdown, or any characters outside of the `<judge>True</judge>` or `<judge>False</judge>` tags.
Example for 2 items:
<judge>True</judge>
<judge>False</judge>
"""  # noqa: E501

PromptStyle = Literal["vragrl", "lang2act"]

_PLACEHOLDER = re.compile(r"\{(query|reference_answer|generated_answer)\}")


def vragrl_judge_prompt(item: JudgeItem) -> str:
    """The VRAG-RL judge prompt for one item (sent as the only, user, message).

    Substitution is single-pass, so an answer containing ``{query}`` is not re-expanded
    (the released code chains ``str.replace``).
    """
    values = {"query": item.query, "reference_answer": item.reference, "generated_answer": item.generated}
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), VRAGRL_JUDGE_TEMPLATE)


def lang2act_user_message(items: Sequence[Mapping[str, object] | JudgeItem]) -> str:
    """Lang2Act's batched judge user message (toolrl.py ``evaluate_chunk_worker``).

    Dict items reproduce the upstream payloads: a missing key prints ``N/A``, a None value
    prints ``None``.

    >>> print(lang2act_user_message([JudgeItem("Q?", "A", "B")]))
    Evaluate the following items and output one <judge> tag per item.
    <BLANKLINE>
    --- ITEM 1 ---
    ## Query
    Q?
    <BLANKLINE>
    ## Reference Answer
    A
    <BLANKLINE>
    ## Generated Answer
    B
    """
    parts = ["Evaluate the following items and output one <judge> tag per item.\n"]
    for j, item in enumerate(items, start=1):
        if isinstance(item, JudgeItem):
            fields: Mapping[str, object] = {
                "query": item.query,
                "reference_answer": item.reference,
                "generated_answer": item.generated,
            }
        else:
            fields = item
        parts.append(
            f"\n--- ITEM {j} ---\n"
            f"## Query\n{fields.get('query', 'N/A')}\n\n"
            f"## Reference Answer\n{fields.get('reference_answer', 'N/A')}\n\n"
            f"## Generated Answer\n{fields.get('generated_answer', 'N/A')}"
        )
    return "".join(parts)


def build_messages(style: PromptStyle, items: Sequence[JudgeItem]) -> list[dict[str, str]]:
    """OpenAI chat messages for one judge request."""
    if style == "vragrl":
        if len(items) != 1:
            raise InvalidInputError(f"the VRAG-RL judge prompt takes one item per request, got {len(items)}")
        return [{"role": "user", "content": vragrl_judge_prompt(items[0])}]
    if style == "lang2act":
        return [
            {"role": "system", "content": LANG2ACT_JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": lang2act_user_message(items)},
        ]
    raise InvalidInputError(f"unknown judge prompt style {style!r}; use 'vragrl' or 'lang2act'")


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
