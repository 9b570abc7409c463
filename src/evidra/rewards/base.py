"""The reward contract shared by every paper's scoring rules.

A reward function maps ``(parsed, sample, trajectory)`` to a ``RewardResult``: a total, the
named components it was built from, per-scope values (RS-GRPO applies each to its own token
span) and per-turn values (process credits). Rule-based rewards are pure and deterministic;
model-based parts (judge, retriever similarity, teacher forcing) are injected services.

A sample whose score could not be computed (e.g. the judge stayed unreachable) is returned
with ``scored=False``: the trainer excludes it from the update and counts it, never scoring
it silently as 0 or 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from evidra.registry import Registry
from evidra.types import Parsed, Sample, Trajectory


@dataclass(frozen=True)
class RewardResult:
    total: float
    components: Mapping[str, float] = field(default_factory=dict)
    scopes: Mapping[str, float] = field(default_factory=dict)  # scope name -> reward for that span
    turns: tuple[float, ...] = ()  # per-turn credits (CAVE), empty for outcome rewards
    scored: bool = True  # False: could not be scored; exclude from the update, count it

    def __post_init__(self) -> None:
        object.__setattr__(self, "components", MappingProxyType(dict(self.components)))
        object.__setattr__(self, "scopes", MappingProxyType(dict(self.scopes)))
        object.__setattr__(self, "turns", tuple(self.turns))

    @classmethod
    def unscored(cls, reason: str) -> RewardResult:
        """A result for a sample that could not be scored (reason kept as a component key)."""
        return cls(total=0.0, components={f"unscored:{reason}": 1.0}, scored=False)


class RewardFn(Protocol):
    def __call__(
        self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None
    ) -> RewardResult: ...


REWARDS: Registry[RewardFn] = Registry("reward")
