"""A sixth method in one file, outside evidra: answer in a few words, rewarded by exact match.

It reuses evidra's pieces (the ``direct`` paradigm, the single-turn environment, the synthetic
documents) and brings its own options, reward and oracle, all from one import,
``evidra.methods.api``. Registering it makes every command take it: ``evidra train sft|rl`` with
``method: {name: short_answer}``, ``evidra eval --method short_answer``, ``evidra ask --method
short_answer``. docs/adding-a-method.md walks through it.

The command line loads it without packaging it (its folder on PYTHONPATH)::

    evidra train rl --method-module short_answer --config short_answer.yaml

or, from a package of your own, through an entry point, so no option is needed::

    [project.entry-points."evidra.methods"]
    short_answer = "short_answer"
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from evidra.methods import api

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

    def __call__(
        self, parsed: api.Parsed, sample: api.Sample, trajectory: api.Trajectory | None = None
    ) -> api.RewardResult:
        answer = parsed.answer or ""
        short = len(answer.split()) <= self.max_words
        right = max((api.exact_match(answer, gold) for gold in sample.answers), default=0.0)
        components = {"answer": right if short else 0.0, "format": float(parsed.ok)}
        return api.RewardResult(api.weighted_sum(components, self.weights), components)


def samples(cfg: api.DataConfig) -> list[api.Sample]:
    return api.synth_samples(cfg, "synth.short_answer")


def oracle(sample: api.Sample) -> list[api.Message]:
    """A correct conversation, the SFT cold start."""
    answer = sample.answers[0] if sample.answers else "not answerable"
    return [
        *api.Direct().build_messages(sample, sample.pages),
        api.Message.text("assistant", f"<think>The page states it.</think><answer>{answer}</answer>"),
    ]


def build(options: ShortAnswerOptions, resources: api.Resources) -> api.Task:
    if options.max_words < 1:
        raise api.ConfigError(f"method.max_words must be >= 1, got {options.max_words}")
    weights = api.merged_weights("short_answer", WEIGHTS, options.weights)
    return api.Task(
        name="short_answer",
        samples=samples,
        make_env=lambda sample: api.SingleTurnEnv(api.Direct()),
        parse=api.Direct().parse,
        reward=ShortAnswerReward(options.max_words, weights),
        oracle=oracle,
        from_benchmark=api.adapter(api.IMAGE_QA, name="short_answer"),
    )


SHORT_ANSWER = api.Method(
    name="short_answer",
    options=ShortAnswerOptions,
    build=build,
    paradigm="direct",
    summary="answer in a few words; exact-match reward",
)
if "short_answer" not in api.METHODS:
    api.METHODS.add("short_answer", SHORT_ANSWER)
