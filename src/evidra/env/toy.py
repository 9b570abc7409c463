"""A toy multi-turn environment: look a key up in a tiny key-value corpus, then answer.

The policy writes ``<search>KEY</search>`` to receive ``<information>VALUE</information>``
and ``<answer>...</answer>`` to finish. Used by tests and the learning checks of the trainer:
a policy can only answer correctly after calling the tool, so learning shows up as reward.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from evidra.core.tagscan import find_named_blocks
from evidra.core.types import Message, Sample
from evidra.env.environment import ENVIRONMENTS, StepInfo, StepResult

SYSTEM = (
    "Answer the question. To look up a key, write <search> key </search> and you will receive "
    "<information> value </information>. Finally write <answer> value </answer>."
)


@dataclass
class KeyValueEnv:
    corpus: Mapping[str, str]
    stop: tuple[str, ...] = ("</search>",)
    searches: int = field(default=0, init=False)
    invalid: int = field(default=0, init=False)

    def reset(self, sample: Sample) -> list[Message]:
        self.searches = self.invalid = 0
        return [Message.text("system", SYSTEM), Message.text("user", f"Question: {sample.question}")]

    def step(self, text: str) -> StepResult:
        match = next(find_named_blocks(text, ("search", "answer")), None)  # <(search|answer)>(.*?)</\1>
        if match is None:
            self.invalid += 1
            reply = "Invalid action: write <search> key </search> or <answer> value </answer>."
            return StepResult((Message.text("user", reply),), info=StepInfo("invalid", invalid=True))
        action, argument = match.head.group(1), match.body().strip()
        if action == "answer":
            return StepResult(done=True, info=StepInfo("answer", answer=argument))
        self.searches += 1
        value = self.corpus.get(argument, "not found")
        info = StepInfo("search", query=argument, hit=argument in self.corpus)
        return StepResult((Message.text("user", f"<information>{value}</information>"),), info=info)


ENVIRONMENTS.add("key_value", KeyValueEnv)
