"""Any reward set under any scope mapping: RS-GRPO beyond EVisRAG.

``with_scopes(task, rules, routes)`` keeps a task's prompt, environment and reward, and turns
its reward *components* into RS-GRPO channels: ``rules`` says which token span each channel
covers (tag markers, as ``rewards.scopes``), ``routes`` which components feed which channels
(a component may feed several, as EVisRAG's format reward does). A channel's value is the sum
of the components routed to it; the trainer then group-normalises each channel on its own
tokens (``algo.advantage=rs_grpo``).

Example (``methods/lat/method.py``, ``method.scoped=true``): LAT's evidence rewards (stepwise
attribution and grounding) and its format reward act on the ``<think>`` chain of evidence, the
accuracy reward on the ``<answer>``:

    evidra train rl --config configs/lat.yaml method.scoped=true algo.advantage=rs_grpo
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial

from evidra.core.types import Parsed, Sample, Trajectory
from evidra.methods.evisrag.paradigm import evidence_scopes
from evidra.rewards.reward import RewardFn, RewardResult
from evidra.rewards.scopes import END, START
from evidra.rl.tasks import Task


@dataclass(frozen=True)
class ScopedReward:
    """Wraps a reward: its components are summed into channels that carry token scopes."""

    base: RewardFn
    routes: Mapping[str, Sequence[str]]  # component -> channels it feeds

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        result = self.base(parsed, sample, trajectory)
        if not result.scored:
            return result
        channels: dict[str, float] = {}
        for component, value in result.components.items():
            for channel in self.routes.get(component, ()):
                channels[channel] = channels.get(channel, 0.0) + value
        return RewardResult(result.total, result.components, channels, result.turns, result.scored)


def with_scopes(
    task: Task, name: str, rules: Mapping[str, tuple[str, str]], routes: Mapping[str, Sequence[str]]
) -> Task:
    """``task`` with its reward components routed to token-scoped RS-GRPO channels."""
    return replace(
        task,
        name=name,
        reward=ScopedReward(task.reward, routes),
        scope_names=tuple(rules),
        scopes=partial(evidence_scopes, rules=rules),
    )


LAT_RULES: Mapping[str, tuple[str, str]] = {"reasoning": (START, "<answer>"), "answer": ("<answer>", END)}
LAT_ROUTES: Mapping[str, Sequence[str]] = {
    "step": ("reasoning",),
    "ground": ("reasoning",),
    "format": ("reasoning", "answer"),
    "accuracy": ("answer",),
}
