"""A dataset row of another RL framework as an evidra ``Sample``, and the text of its messages.

TRL hands a reward its dataset columns (one value per completion) and its prompts and
completions as strings or chat messages; verl hands ``compute_score`` an ``extra_info`` mapping.
Both adapters (``frameworks``) and TRL environments (``trl_env``) read a row here, so the same row
gives the same sample wherever it is scored.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from evidra.core.types import Sample

ANSWER_KEYS = ("answers", "answer", "ground_truth", "reference_answer", "short_answer", "label")
QUESTION_KEYS = ("question", "query", "problem")


def message_text(value: object) -> str:
    """Text of a prompt or completion in TRL's shapes: a string, a message list (the last
    message's content), a message, or a list of content parts (their text parts joined)."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        if "content" in value:
            return message_text(value["content"])
        return str(value.get("text", ""))
    if isinstance(value, Sequence) and value:
        if all(isinstance(v, Mapping) and "role" in v for v in value):
            return message_text(value[-1])
        return "".join(message_text(v) for v in value)
    return "" if value is None or isinstance(value, Sequence) else str(value)


def as_strings(value: object) -> tuple[str, ...]:
    """A column's value as strings: none, one string, or each item of a list as a string."""
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence):
        return tuple(str(v) for v in value)
    return (str(value),)


def sample_from_fields(fields: Mapping[str, object], *, index: int = 0, prompt: object = None) -> Sample:
    """An evidra ``Sample`` from one dataset row's fields (TRL columns or verl ``extra_info``).

    The question comes from ``question``/``query``/``problem`` or else the prompt's last user
    text; answers from ``answers``/``answer``/``ground_truth``...; every other field is kept in
    ``Sample.extras`` (page indices, gold boxes...) for rewards that read them.

    >>> s = sample_from_fields({"query": "Who wrote it?", "answer": "Ada", "gold_pages": ["p3"]})
    >>> s.question, s.answers, s.gold_pages
    ('Who wrote it?', ('Ada',), ('p3',))
    """
    asked = next((str(fields[k]) for k in QUESTION_KEYS if fields.get(k)), "")
    question = asked or message_text(prompt) or "(none)"
    answers = next((as_strings(fields[k]) for k in ANSWER_KEYS if k in fields), ())
    answerable = bool(fields.get("answerable", True))
    sid = str(fields.get("id", fields.get("sample_id", index)))
    gold, source = as_strings(fields.get("gold_pages")), str(fields.get("data_source", ""))
    return Sample(
        id=sid or str(index),
        question=question,
        answers=answers,
        answerable=answerable,
        gold_pages=gold,
        dataset=source,
        extras=dict(fields),
    )
