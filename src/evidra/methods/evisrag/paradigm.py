"""EVisRAG's evidence-guided format: observe -> per-image evidence -> think -> answer
(EVisRAG §3, Figure 10).

The prompt (Figure 10, "The Prompt Template for EVisRAG (SFT&GRPO)") is one user turn: the
instruction text with the question comes first and the images after it, as the released
training data lays it out. Evidence is recorded per image as ``[i]: ...`` or
``[i]: no relevant information``; an unanswerable context is answered "insufficient to answer".

RS-GRPO (Eq. 7) trains each reward on the tokens of its scopes; :func:`evidence_scopes` finds
those spans on the exact sampled token ids with ``evidra.rewards.scopes``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.core.tagscan import parse_digits
from evidra.core.types import ImagePart, Message, Page, Parsed, Sample, Span, Step, TextPart, Trajectory
from evidra.metrics.text import INSUFFICIENT_ANSWER, NO_RELEVANT_INFORMATION
from evidra.paradigms.paradigm import PARADIGMS
from evidra.rewards.boxes import extract_tag
from evidra.rewards.scopes import PAPER_SCOPE_RULES, UPSTREAM_SCOPE_RULES, rule_spans, scope_spans

if TYPE_CHECKING:
    from evidra.models.hf_types import Tokenizer

# EVisRAG Figure 10, verbatim (the backticks are in the paper's template).
EVIDENCE_PROMPT = """You are an AI Visual QA assistant. I will provide you with a question and several images. Please follow the four steps below:

Step 1: Observe the Images
First, analyze the question and consider what types of images may contain relevant information. Then, examine each image one by one, paying special attention to aspects related to the question. Identify whether each image contains any potentially relevant information.
Wrap your observations within `<observe></observe>` tags.

Step 2: Record Evidences from Images
After reviewing all images, record the evidence you find for each image within `<evidence></evidence>` tags.
If you are certain that an image contains no relevant information, record it as: [i]: no relevant information (where i denotes the index of the image).
If an image contains relevant evidence, record it as: [j]: [the evidence you find for the question] (where j is the index of the image).

Step 3: Reason Based on the Question and Evidences
Based on the recorded evidences, reason about the answer to the question.
Include your step-by-step reasoning within `<think></think>` tags.

Step 4: Answer the Question
Provide your final answer based only on the evidences you found in the images.
Wrap your answer within `<answer></answer>` tags.
Avoid adding unnecessary contents in your final answer, like if the question is a yes/no question, simply answer "yes" or "no".
If none of the images contain sufficient information to answer the question, respond with `<answer>insufficient to answer</answer>`.

Formatting Requirements:
Use the exact tags `<observe>`, `<evidence>`, `<think>`, and `<answer>` for structured output.
It is possible that none, one, or several images contain relevant evidence.
If you find no evidence or few evidences, and insufficient to help you answer the question, follow the instruction above for insufficient information.

Question and images are provided below. Please follow the steps as instructed.
Question: {query}"""  # noqa: E501

TAGS = ("observe", "evidence", "think", "answer")
SCOPE_NAMES = ("observe", "evidence", "think", "answer")  # PAPER_SCOPE_RULES, EVisRAG Eq. 7
_ENTRY = re.compile(r"\[(\d+)\]\s*:")


def evidence_entries(block: str) -> list[tuple[int | None, str]]:
    """``[i]: text`` entries of an evidence block in written order (i is 1-based as written;
    None when it is too long to be an image number, see ``evidra.core.tagscan.parse_digits``).

    >>> evidence_entries("[1]: no relevant information\\n[2]: Revenue was $5M")
    [(1, 'no relevant information'), (2, 'Revenue was $5M')]
    """
    marks = list(_ENTRY.finditer(block))
    out = []
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(block)
        out.append((parse_digits(m.group(1)), block[m.end() : end].strip()))
    return out


def _order_errors(text: str) -> list[str]:
    positions = [text.find(f"<{t}>") for t in TAGS]
    present = [p for p in positions if p >= 0]
    errors = [f"missing <{t}>" for t, p in zip(TAGS, positions, strict=True) if p < 0]
    if present != sorted(present):
        errors.append("tags out of order (observe, evidence, think, answer)")
    for tag in TAGS:
        if text.count(f"<{tag}>") > 1:
            errors.append(f"<{tag}> repeated")
    return errors


def parse_evidence(text: str) -> Parsed:
    """Observe/evidence/think/answer blocks; one ``Step`` per evidence entry (page_index 0-based,
    None when the written index is 0 or not a number). Never raises."""
    errors = _order_errors(text)
    fields = {t: v for t in TAGS if (v := extract_tag(text, t)) is not None}
    steps = []
    for index, entry in evidence_entries(fields.get("evidence", "")):
        if index is None:
            errors.append("evidence index is not an image number (too many digits)")
        elif index < 1:
            errors.append(f"evidence index [{index}] is not 1-based")
        if entry.lower().strip(". ") == NO_RELEVANT_INFORMATION:
            continue
        steps.append(Step(entry, index - 1 if index is not None and index >= 1 else None))
    answer = fields.get("answer")
    return Parsed(
        text=text,
        answer=answer.strip() if answer is not None else None,
        steps=tuple(steps),
        fields=fields,
        errors=tuple(errors),
    )


def marker_ids(
    tokenizer: Tokenizer, markers: Sequence[str] = ("<evidence>", "<think>", "<answer>")
) -> dict[str, list[int]]:
    """Token ids of each scope marker as the policy's tokenizer writes it."""
    return {m: list(tokenizer.encode(m, add_special_tokens=False)) for m in markers}


def token_ids_scopes(
    trajectory: Trajectory, tokenizer: Tokenizer, rules: Mapping[str, tuple[str, str]] = UPSTREAM_SCOPE_RULES
) -> dict[str, tuple[Span, ...]]:
    """Scopes found as the released router finds them: the first contiguous occurrence of each
    marker's standalone token ids. A tag the tokenizer merges with a neighbour (``"><"`` is one
    token in Qwen's vocabulary) is not found and its scope falls back to the sequence bounds."""
    spans = scope_spans(trajectory.token_ids, marker_ids(tokenizer), rules)
    return {name: (span,) for name, span in spans.items()}


def token_at_char(ids: Sequence[int], tokenizer: Tokenizer, char: int) -> int:
    """Index of the token whose decoded text covers character ``char`` of ``decode(ids)``:
    the smallest m with ``len(decode(ids[:m + 1])) > char``, by binary search (log n decodes)."""
    lo, hi = 0, len(ids)
    while lo < hi:
        mid = (lo + hi) // 2
        if len(tokenizer.decode(list(ids[: mid + 1]), skip_special_tokens=False)) > char:
            hi = mid
        else:
            lo = mid + 1
    return lo


def evidence_scopes(
    trajectory: Trajectory, tokenizer: Tokenizer, rules: Mapping[str, tuple[str, str]] = PAPER_SCOPE_RULES
) -> dict[str, tuple[Span, ...]]:
    """Token spans of each RS-GRPO scope (EVisRAG Eq. 7) on the exact sampled ids.

    Each marker is located in the decoded text (its first occurrence) and mapped back to the
    token that holds its first character, so a tag merged with a neighbouring character by the
    tokenizer still splits the scopes; a marker that does not occur falls back to the sequence
    bounds (``scope_spans``' rule). The released router's token-id matching is
    :func:`token_ids_scopes`.
    """
    ids = trajectory.token_ids
    text = tokenizer.decode(list(ids), skip_special_tokens=False)

    def locate(marker: str) -> int:
        at = text.find(marker)
        return token_at_char(ids, tokenizer, at) if at >= 0 else -1

    return {name: (span,) for name, span in rule_spans(rules, locate, len(ids)).items()}


def upstream_scopes(trajectory: Trajectory, tokenizer: Tokenizer) -> dict[str, tuple[Span, ...]]:
    """The released router's six scopes (``UPSTREAM_SCOPE_RULES``, token-id matching)."""
    return token_ids_scopes(trajectory, tokenizer, UPSTREAM_SCOPE_RULES)


@dataclass(frozen=True)
class EvidenceGuided:
    """EVisRAG prompt + parser; ``scope_tags`` are the RS-GRPO channels."""

    name: str = "evidence"
    prompt: str = EVIDENCE_PROMPT
    scope_tags: tuple[str, ...] = SCOPE_NAMES

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        parts: list[ImagePart | TextPart] = [TextPart(self.prompt.replace("{query}", sample.question))]
        parts.extend(ImagePart(p.image_path, page_id=p.id) for p in pages)
        return [Message("user", tuple(parts))]

    def parse(self, text: str) -> Parsed:
        return parse_evidence(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("perception", "derivation", "format")  # EVisRAG Eqs. 11-13


def evidence_oracle_text(sample: Sample) -> str:
    """A correct EVisRAG answer from the gold evidence, for SFT cold start.

    An answerable sample without gold evidence text would teach "no relevant information" next to
    an answer: ``InvalidInputError`` instead.
    """
    if sample.answerable and sample.sufficient is not False and not sample.gold_evidence:
        raise InvalidInputError(f"sample {sample.id!r}: an EVisRAG oracle needs the gold evidence text")
    lines = [
        f"[{i}]: {sample.gold_evidence.get(p.id, NO_RELEVANT_INFORMATION)}"
        for i, p in enumerate(sample.pages, 1)
    ]
    useful = [i for i, p in enumerate(sample.pages, 1) if p.id in sample.gold_evidence]
    if sample.answerable and sample.answers and sample.sufficient is not False:
        observe = f"Image {useful[0]} contains information related to the question." if useful else ""
        think = f"According to the evidence, the answer is {sample.answers[0]}."
        answer = sample.answers[0]
    else:
        observe = "None of the images contains information that answers the question."
        think = "The recorded evidence is insufficient to answer the question."
        answer = INSUFFICIENT_ANSWER
    evidence = "\n".join(lines)
    return (
        f"<observe>{observe}</observe><evidence>{evidence}</evidence>"
        f"<think>{think}</think><answer>{answer}</answer>"
    )


PARADIGMS.add("evidence", EvidenceGuided)
