"""Everything a method written outside evidra needs, from one import.

    from evidra.methods import api

    @dataclass(frozen=True)
    class MyOptions:
        weights: Mapping[str, float] = field(default_factory=dict)

    def build(options: MyOptions, resources: api.Resources) -> api.Task:
        ...

    api.METHODS.add("my_method", api.Method(name="my_method", options=MyOptions, build=build,
                                            paradigm="direct"))

The names here are the ones the paper methods of ``evidra.methods`` are built from: the
``Method`` record and its registry, the ``Task`` the trainer is handed, the records a task
passes around (``Sample``, ``Parsed``, ``Trajectory``, ``Message``), the paradigm and
environment protocols with the single-turn pieces, the reward record and its weighting, the
answer judge, the text metrics and the error to raise for a bad option. The command line loads a
module of your own with ``evidra --method-module my_pkg.my_method`` (docs/adding-a-method.md).
"""

from __future__ import annotations

from evidra.core.errors import ConfigError, EvidraError
from evidra.core.registry import Registry
from evidra.core.types import Message, Page, Parsed, Sample, Span, Trajectory
from evidra.env.environment import ENVIRONMENTS, Environment, StepInfo, StepResult
from evidra.env.single_turn import SingleTurnEnv
from evidra.methods._benchmark import IMAGE_QA, adapter
from evidra.methods._synth import synth_samples
from evidra.methods.method import (
    METHODS,
    Method,
    Resources,
    import_method_module,
    merged_weights,
    method_judge,
)
from evidra.metrics.text import bow_f1, exact_match, substring_em
from evidra.paradigms.direct import Direct
from evidra.paradigms.paradigm import PARADIGMS, Paradigm, first_tag
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig
from evidra.rewards.judge_prompts import JUDGE_PROMPTS
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict
from evidra.rewards.reward import REWARDS, Reward, RewardFn, RewardResult, check_weights, weighted_sum
from evidra.rl.run_config import DataConfig
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task

__all__ = [
    "ENVIRONMENTS",
    "IMAGE_QA",
    "JUDGE_PROMPTS",
    "METHODS",
    "PARADIGMS",
    "REWARDS",
    "ConfigError",
    "DataConfig",
    "Direct",
    "Environment",
    "EvidraError",
    "Judge",
    "JudgeConfig",
    "JudgeItem",
    "Message",
    "Method",
    "Page",
    "Paper",
    "Paradigm",
    "Parsed",
    "Registry",
    "Resources",
    "Reward",
    "RewardFn",
    "RewardResult",
    "RuleJudge",
    "Sample",
    "SingleTurnEnv",
    "Span",
    "StepInfo",
    "StepResult",
    "Task",
    "Trajectory",
    "Verdict",
    "adapter",
    "bow_f1",
    "check_weights",
    "exact_match",
    "first_tag",
    "import_method_module",
    "merged_weights",
    "method_judge",
    "substring_em",
    "synth_samples",
    "weighted_sum",
]
