"""A sixth method in one file, outside evidra: answer in a few words, rewarded by exact match.

It reuses evidra's pieces (the ``direct`` paradigm, the single-turn environment, the synthetic
documents) and brings its own options, reward and oracle. Registering it makes every command
take it: ``evidra train sft|rl`` with ``method: {name: short_answer}``, ``evidra eval --method
short_answer``, ``evidra ask --method short_answer``. docs/adding-a-method.md walks through it.

Register it by importing this module (``METHODS.add`` below), or from a package of your own
through an entry point, so the ``evidra`` command finds it without an import::

    [project.entry-points."evidra.methods"]
    short_answer = "short_answer"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from evidra.env.single_turn import SingleTurnEnv
from evidra.errors import ConfigError
from evidra.methods import IMAGE_QA, METHODS, Method, Resources, adapter, merged_weights, synth_samples
from evidra.metrics.text import exact_match
from evidra.paradigms.direct import Direct
from evidra.rewards.base import RewardResult, weighted_sum
from evidra.rl.config import DataConfig
from evidra.rl.tasks import Task
from evidra.types import Message, Parsed, Sample, Trajectory

WEIGHTS = {"answer": 1.0, "format": 0.2}


@dataclass(frozen=True)
class ShortAnswerOptions:
    """The ``method:`` section of a short_answer recipe: its own options only."""

    max_words: int = 8  # answers longer than this earn no answer reward
    weights: Mapping[str, float] = field(default_factory=dict)  # answer, format -> weight


@dataclass(frozen=True)
class ShortAnswerReward:
    """answer: exact match with a gold answer, within ``max_words``; format: <think> and <answer>."""

    max_words: int
    weights: Mapping[str, float]

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        answer = parsed.answer or ""
        short = len(answer.split()) <= self.max_words
        right = max((exact_match(answer, gold) for gold in sample.answers), default=0.0)
        components = {"answer": right if short else 0.0, "format": float(parsed.ok)}
        return RewardResult(weighted_sum(components, self.weights), components)


def samples(cfg: DataConfig) -> list[Sample]:
    return synth_samples(cfg, "synth.short_answer")


def oracle(sample: Sample) -> list[Message]:
    """A correct conversation, the SFT cold start."""
    answer = sample.answers[0] if sample.answers else "not answerable"
    return [
        *Direct().build_messages(sample, sample.pages),
        Message.text("assistant", f"<think>The page states it.</think><answer>{answer}</answer>"),
    ]


def build(options: ShortAnswerOptions, resources: Resources) -> Task:
    if options.max_words < 1:
        raise ConfigError(f"method.max_words must be >= 1, got {options.max_words}")
    weights = merged_weights("short_answer", WEIGHTS, options.weights)
    return Task(
        name="short_answer",
        samples=samples,
        make_env=lambda sample: SingleTurnEnv(Direct()),
        parse=Direct().parse,
        reward=ShortAnswerReward(options.max_words, weights),
        oracle=oracle,
        from_benchmark=adapter(IMAGE_QA, name="short_answer"),
    )


SHORT_ANSWER = Method(
    name="short_answer",
    options=ShortAnswerOptions,
    build=build,
    paradigm="direct",
    summary="answer in a few words; exact-match reward",
)
if "short_answer" not in METHODS:
    METHODS.add("short_answer", SHORT_ANSWER)
