"""The environment protocol: one episode of a paradigm, turn by turn.

``reset(sample)`` returns the prompt messages; ``step(text)`` takes the policy's text of one
turn and returns the observation to insert (user messages with text and images) or ``done``.
A single-turn paradigm is an environment that ends after one step, so one rollout loop serves
every paradigm.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from evidra.registry import Registry
from evidra.types import Message, Sample


@dataclass(frozen=True)
class StepResult:
    """What the environment answers to one policy turn."""

    observation: tuple[Message, ...] = ()  # inserted as the next user turn(s); empty when done
    done: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)  # action, invalid, retrieved ids...

    def __post_init__(self) -> None:
        object.__setattr__(self, "observation", tuple(self.observation))
        object.__setattr__(self, "info", MappingProxyType(dict(self.info)))


class Environment(Protocol):
    """One episode at a time; create one instance per episode (they keep state)."""

    @property
    def stop(self) -> tuple[str, ...]:
        """Strings that end a policy turn besides end-of-turn (e.g. ``</search>``)."""
        ...

    def reset(self, sample: Sample) -> list[Message]: ...

    def step(self, text: str) -> StepResult: ...


@dataclass(frozen=True)
class SearchRequest:
    """A search an environment is about to run for the policy's text of this turn: the rollout
    loop gathers the requests of every active episode and asks each index once per turn."""

    searcher: Any  # the index (anything with ``search(queries, k, exclude)``)
    query: str
    k: int
    exclude: frozenset[str]


class BatchedSearch(Protocol):
    """An environment whose searches the rollout loop may run in a batch for it."""

    def pending_search(self, text: str) -> SearchRequest | None:
        """The search ``step(text)`` would run, or None."""
        ...

    def prefetch(self, hits: Any) -> None:
        """The hits of that search, used by the next ``step`` instead of asking the index."""
        ...


ENVIRONMENTS: Registry[Any] = Registry("environment")


def play_script(env: Environment, sample: Sample, turns: list[str]) -> list[Message]:
    """The conversation of ``turns`` played through ``env`` (an oracle trajectory for SFT):
    the prompt, then each assistant turn followed by the observation it produced."""
    messages = env.reset(sample)
    for text in turns:
        result = env.step(text)
        messages.append(Message.text("assistant", text))
        messages.extend(result.observation)
    return messages  # name -> factory(**options) -> Environment
