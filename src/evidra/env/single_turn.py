"""A paradigm's prompt, one policy turn, done."""

from __future__ import annotations

from dataclasses import dataclass, field

from evidra.core.types import Message, Sample
from evidra.env.environment import ENVIRONMENTS, StepInfo, StepResult
from evidra.paradigms.paradigm import Paradigm


@dataclass
class SingleTurnEnv:
    paradigm: Paradigm
    stop: tuple[str, ...] = ()
    _sample: Sample | None = field(default=None, repr=False)

    def reset(self, sample: Sample) -> list[Message]:
        self._sample = sample
        return self.paradigm.build_messages(sample, sample.pages)

    def step(self, text: str) -> StepResult:
        parsed = self.paradigm.parse(text)  # the one parse of the turn: scoring reuses it
        return StepResult(done=True, info=StepInfo("answer", turn=1), parsed=parsed)


ENVIRONMENTS.add("single_turn", SingleTurnEnv)
