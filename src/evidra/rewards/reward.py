"""The reward contract shared by every paper's scoring rules, and the one weighted sum.

A reward function maps ``(parsed, sample, trajectory)`` to a ``RewardResult``: a total, the
named components it was built from, per-scope values (RS-GRPO applies each to its own token
span) and per-turn values (process credits). Rule-based rewards are pure and deterministic;
model-based parts (judge, retriever similarity, teacher forcing) are injected services.

Every paper's reward is a set of named components and ONE weight mapping (component name ->
weight, ``check_weights``); its total is ``weighted_sum`` of the two, here and nowhere else. A
variant (the paper's rules or the released code's) is a registered reward of its own in
``REWARDS`` (``lat`` and ``lat.upstream``, ``lat.ground`` and ``lat.ground.upstream``, ...).

A sample whose score could not be computed (e.g. the judge stayed unreachable) is returned
with ``scored=False``: the trainer excludes it from the update and counts it, never scoring
it silently as 0 or 1.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from evidra.core.errors import InvalidInputError
from evidra.core.registry import METHOD_PLUGINS, Registry
from evidra.core.types import Parsed, Sample, Trajectory


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

    @classmethod
    def weighted(
        cls, values: Mapping[str, float], weights: Mapping[str, float], **extra: object
    ) -> RewardResult:
        """A result whose total is ``weighted_sum(values, weights)``; ``extra``: scopes, turns."""
        return cls(total=weighted_sum(values, weights), components=values, **extra)  # type: ignore[arg-type]

    def log(self, prefix: str = "reward") -> dict[str, float]:
        """Flat scalars for a metrics sink: the total, each component and scope, the turn count.

        >>> RewardResult(1.5, {"answer": 1.0}, {"think": 0.5}).log("lat")
        {'lat/total': 1.5, 'lat/answer': 1.0, 'lat/scope/think': 0.5, 'lat/scored': 1.0}
        """
        out = {f"{prefix}/total": self.total}
        out.update({f"{prefix}/{name}": value for name, value in self.components.items()})
        out.update({f"{prefix}/scope/{name}": value for name, value in self.scopes.items()})
        if self.turns:
            out[f"{prefix}/turns"] = float(len(self.turns))
        out[f"{prefix}/scored"] = float(self.scored)
        return out


def weighted_sum(values: Mapping[str, float], weights: Mapping[str, float]) -> float:
    """The total of every reward: ``sum(weights[name] * value)`` over the components, in the
    order of ``values`` (a variant that reproduces released code lists its components in the
    released order of addition, so the floats match bit for bit); a component without a weight
    counts 0.

    >>> weighted_sum({"answer": 1.0, "format": 1.0}, {"answer": 0.8, "format": 0.2})
    1.0
    """
    return sum((weights.get(name, 0.0) * value for name, value in values.items()), 0.0)


def check_weights(weights: Mapping[str, float], components: Collection[str], owner: str) -> dict[str, float]:
    """``weights`` as a dict, each key one of ``components`` and each value finite and >= 0;
    otherwise a one-line ``InvalidInputError`` naming the key and the fix (did you mean ...)."""
    out: dict[str, float] = {}
    for name, value in weights.items():
        if name not in components:
            close = difflib.get_close_matches(str(name), list(components), n=1)
            close = close or [c for c in components if c.startswith(str(name))][:1]
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise InvalidInputError(
                f"{owner} has no reward component {name!r}; {hint}its components: {', '.join(components)}"
            )
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidInputError(f"weight of {owner} component {name!r} must be a number, got {value!r}")
        if value < 0:
            raise InvalidInputError(f"weight of {owner} component {name!r} must be >= 0, got {value}")
        out[name] = float(value)
    return out


class RewardFn(Protocol):
    def __call__(
        self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None
    ) -> RewardResult: ...


class Reward(RewardFn, Protocol):
    """A paper's reward: named components, one weight mapping, a total that is their weighted sum.

    ``components`` are every component the reward can compute; ``weights`` the ones it adds
    (``component_names``, in order); ``reweighted`` gives a copy with some weights replaced
    (checked against ``components``).
    """

    @property
    def components(self) -> tuple[str, ...]: ...
    @property
    def weights(self) -> Mapping[str, float]: ...
    @property
    def component_names(self) -> tuple[str, ...]: ...
    def reweighted(self, weights: Mapping[str, float]) -> Reward: ...


REWARDS: Registry[RewardFn] = Registry("reward", plugins=METHOD_PLUGINS)
