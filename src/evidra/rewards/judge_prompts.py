"""The prompts that carry answers to an LLM judge, one registered ``JudgePrompt`` per paper.

A prompt turns a batch of ``JudgeItem``s into the chat messages of one request and says how
many items a request holds; the reply is read by ``judge_protocol.parse_verdicts`` (one
``<judge>True|False</judge>`` per item). A recipe names its prompt (``judge.prompt``); a method
names its paper's default. Each paper's prompt lives in its method's folder (``judge.py``) and
is registered when the method is imported; the registry loads the methods on a first miss.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.core.registry import METHOD_PLUGINS, Registry
from evidra.rewards.judge_protocol import JudgeItem

Messages = list[dict[str, str]]


@dataclass(frozen=True)
class JudgePrompt:
    """How items reach a judge: ``messages(items)`` for one request of at most ``per_request``
    items (0: as many as the judge's ``batch_size``)."""

    name: str
    messages: Callable[[Sequence[JudgeItem]], Messages]
    per_request: int = 0


JUDGE_PROMPTS: Registry[JudgePrompt] = Registry("judge prompt", plugins=METHOD_PLUGINS)

PLACEHOLDER = re.compile(r"\{(query|reference_answer|generated_answer)\}")


def fill(template: str, item: JudgeItem) -> str:
    """``template`` with ``{query}``, ``{reference_answer}`` and ``{generated_answer}`` replaced
    in one pass, so an answer containing ``{query}`` is not expanded again."""
    values = {"query": item.query, "reference_answer": item.reference, "generated_answer": item.generated}
    return PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), template)


def one_item(items: Sequence[JudgeItem], name: str) -> JudgeItem:
    """The only item of a request to a prompt that takes one item per request."""
    if len(items) != 1:
        raise InvalidInputError(f"the {name} judge prompt takes one item per request, got {len(items)}")
    return items[0]


def build_messages(prompt: str, items: Sequence[JudgeItem]) -> Messages:
    """OpenAI chat messages of one judge request with the registered prompt ``prompt``."""
    return JUDGE_PROMPTS.get(prompt).messages(items)
