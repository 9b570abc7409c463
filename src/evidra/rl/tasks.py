"""Tasks: what to train on. A task bundles a dataset, an environment, a parser and a reward.

The trainer knows only this ``Task`` record. The paper methods build theirs from their own
options (``evidra.methods``) and hand it to the trainer; ``TASKS`` holds plain tasks
chosen by ``data.task``: the toy tasks here, small and verifiable, for the trainer's learning
checks and for smoke runs on a CPU.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import ConfigError
from evidra.core.registry import Registry
from evidra.core.types import Message, Page, Parsed, Sample, Span, Trajectory
from evidra.env.environment import Environment, StepInfo
from evidra.env.single_turn import SingleTurnEnv
from evidra.env.toy import KeyValueEnv
from evidra.rewards.reward import RewardFn, RewardResult
from evidra.rewards.toy import digit_fraction, key_value_answer, parse_answer, text_length
from evidra.rl.run_config import DataConfig
from evidra.safeio.cache import private_cache_dir

if TYPE_CHECKING:
    from evidra.models.hf_types import Tokenizer
    from evidra.models.loading import VLM
    from evidra.rollout import Episode

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Task:
    name: str
    samples: Callable[[DataConfig], list[Sample]]
    make_env: Callable[[Sample], Environment]
    parse: Callable[[str], Parsed]
    reward: RewardFn
    oracle: Callable[[Sample], list[Message]] | None = None  # a correct conversation, for SFT
    scope_names: tuple[str, ...] = ()  # reward channels with token scopes (RS-GRPO)
    scopes: Callable[[Trajectory, Tokenizer], Mapping[str, tuple[Span, ...]]] | None = None
    # (policy VLM, episodes) -> one result per episode: rewards that need the policy model or the
    # environments' infos (CAVE's teacher-forced credits, VRAG-RL's retrieved pages); replaces score
    score_episodes: Callable[[VLM, Sequence[Episode]], list[RewardResult]] | None = None
    # (final parse, sample, policy turns, the environment's step infos) -> result: a reward that
    # reads what the environment did (UniDoc-RL's candidates, selections and crops), for the
    # evaluation of finished episodes; None: ``reward`` on the final parse
    score_steps: Callable[[Parsed, Sample, Trajectory, tuple[StepInfo, ...]], RewardResult] | None = None
    # published-benchmark samples (``data.source``) -> this task's: keep the usable ones, fill
    # what the task needs (``evidra.methods._benchmark``); None: the task's own data only
    from_benchmark: Callable[[list[Sample], DataConfig], list[Sample]] | None = None
    # cuts each sample's pages to the ones the question is shown (a method's page budget, after
    # ``data.subset``); None: every page of the sample
    select_pages: Callable[[list[Sample]], list[Sample]] | None = None
    # generated samples (``data.synthetic``) -> this task's, as ``from_benchmark``; None: not taken
    from_synthetic: Callable[[list[Sample], DataConfig], list[Sample]] | None = None

    def score(self, sample: Sample, trajectory: Trajectory, parsed: Parsed | None = None) -> RewardResult:
        """Parse the final policy turn and score it (the reward also sees the whole trajectory)."""
        text = trajectory.texts[-1] if trajectory.texts else ""
        return self.reward(self.parse(text) if parsed is None else parsed, sample, trajectory)


def plain_task(name: str) -> Task:
    """The plain task ``data.task`` names (a ``ConfigError`` with the fix for a paper method's name)."""
    if name not in TASKS:
        raise ConfigError(
            f"data.task={name!r} is no plain task ({', '.join(TASKS.names())}); a paper method is set with "
            "method.name and its task built by evidra.methods.build_task, then passed to the trainer"
        )
    return TASKS.get(name)


def config_task(method: Mapping[str, object], data: DataConfig, entry: str) -> Task:
    """The task of a config handed to a trainer without one: the plain task ``data.task`` names.

    A config that names a paper method (``method.name``) is an error naming ``entry``, the
    function of ``evidra.methods`` that builds the method's task: never a silent toy task.
    """
    if method.get("name"):
        raise ConfigError(
            f"this config trains method {method['name']!r}, whose task the trainer cannot build: use "
            f"evidra.methods.{entry}(cfg) (or pass task=evidra.methods.task_for(cfg))"
        )
    return plain_task(data.task)


def task_samples(task: Task, cfg: DataConfig) -> list[Sample]:
    """The samples a run trains on: the task's own, or with ``data.source`` a benchmark's.

    Benchmark samples go through ``task.from_benchmark``; more than ``data.size`` of them (when
    it is not 0) are subsampled with ``data.seed``, keeping their order. ``data.subset`` then
    keeps the samples its file keeps, and ``task.select_pages`` (a method's page budget) cuts
    each sample's pages to the ones it is shown.
    """
    samples = _own_or_benchmark(task, cfg)
    samples = _subset(samples, cfg.subset) if cfg.subset else samples
    return task.select_pages(samples) if task.select_pages is not None else samples


def _own_or_benchmark(task: Task, cfg: DataConfig) -> list[Sample]:
    if cfg.source and cfg.synthetic:
        raise ConfigError("data.source and data.synthetic both name the training data; keep one")
    if cfg.synthetic:
        return _synthetic(task, cfg)
    if not cfg.source:
        return task.samples(cfg)
    if task.from_benchmark is None:
        raise ConfigError(f"task {task.name!r} trains on its own generated data only; remove data.source")
    if not cfg.path:
        raise ConfigError(f"data.source={cfg.source} needs data.path: the benchmark's files")
    from evidra.data.loaders import load, parse_options

    loaded = load(cfg.source, cfg.path, **parse_options(cfg.options))
    samples = task.from_benchmark(loaded, cfg)
    if 0 < cfg.size < len(samples):
        logger.warning(
            "training on %d of %d %s samples (data.size=%d; data.size=0 uses all)",
            cfg.size,
            len(samples),
            cfg.source,
            cfg.size,
        )
        keep = sorted(random.Random(cfg.seed).sample(range(len(samples)), cfg.size))
        samples = [samples[i] for i in keep]
    return samples


def synthetic_mixture(cfg: DataConfig) -> list[Sample]:
    """``data.size`` samples of the ``data.synthetic`` mixture (train split, ``data.seed``), drawn
    under ``data.path`` or the private cache."""
    from pathlib import Path

    from evidra.data.synth.sources import mixture

    root = Path(cfg.path).expanduser() if cfg.path else private_cache_dir(_CACHE_FIX) / "synthetic"
    return mixture(cfg.synthetic, root, cfg.size, seed=cfg.seed, split="train")


_CACHE_FIX = "or set data.path to a folder of your own"


def _synthetic(task: Task, cfg: DataConfig) -> list[Sample]:
    if task.from_synthetic is None:
        raise ConfigError(f"task {task.name!r} trains on its own generated data only; remove data.synthetic")
    return task.from_synthetic(synthetic_mixture(cfg), cfg)


def _subset(samples: list[Sample], path: str) -> list[Sample]:
    """The samples ``path`` (``evidra data filter``) keeps, in its order."""
    from evidra.rl.subset import read_subset

    ids = read_subset(path)
    by_id = {s.id: s for s in samples}
    missing = [i for i in ids if i not in by_id]
    kept = [by_id[i] for i in ids if i in by_id]
    if not kept:
        raise ConfigError(
            f"data.subset {path!r} keeps none of this run's {len(samples)} samples (e.g. {ids[0]!r}); "
            "filter with the same data section as the run"
        )
    if missing:
        logger.warning(
            "data.subset: %d kept ids are not among this run's samples (e.g. %r)", len(missing), missing[0]
        )
    return kept


def usable(
    samples: Sequence[Sample], checks: Sequence[Callable[[Sample], str | None]], what: str
) -> list[Sample]:
    """The samples every check accepts (a check returns why it rejects one, or None).

    Rejections are counted by reason and logged once; if none is left, a ``ConfigError`` lists
    the reasons, so a benchmark that cannot train a task fails before any model is loaded.
    """
    kept, reasons, example = [], Counter[str](), dict[str, str]()
    for sample in samples:
        why = next((r for r in (check(sample) for check in checks) if r is not None), None)
        if why is None:
            kept.append(sample)
        else:
            reasons[why] += 1
            example.setdefault(why, sample.id)
    summary = ", ".join(f"{n} {why} (e.g. {example[why]!r})" for why, n in reasons.most_common())
    if not kept:
        raise ConfigError(f"none of the {len(samples)} samples can train {what}: {summary}")
    if reasons:
        logger.warning(
            "%s: skipped %d of %d samples (%s)", what, sum(reasons.values()), len(samples), summary
        )
    return kept


TASKS: Registry[Task] = Registry("task")


@dataclass(frozen=True)
class _Prompt:
    """A fixed single-turn prompt paradigm for toy tasks."""

    text: str
    name: str = "prompt"

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        return [Message.text("user", f"{self.text}\n{sample.question}")]

    def parse(self, text: str) -> Parsed:
        return Parsed(text=text)

    def reward_names(self) -> tuple[str, ...]:
        return ("digits",)


def _digit_samples(cfg: DataConfig) -> list[Sample]:
    rng = random.Random(cfg.seed)
    words = ["apples", "pages", "tables", "charts", "boxes", "years", "cities", "rows"]
    return [
        Sample(id=f"digits-{i}", question=f"How many {rng.choice(words)} are there?", dataset="toy.digits")
        for i in range(cfg.size)
    ]


def _key_value_samples(cfg: DataConfig) -> list[Sample]:
    rng = random.Random(cfg.seed)
    keys = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "theta", "kappa"]
    corpus = {k: str(rng.randint(10, 99)) for k in keys}
    out = []
    for i in range(cfg.size):
        key = keys[i % len(keys)]
        out.append(
            Sample(
                id=f"kv-{i}",
                question=f"What is the value of {key}?",
                answers=(corpus[key],),
                dataset="toy.key_value",
                extras={"corpus": corpus, "key": key, "round": i // len(keys)},
            )
        )
    return out


def _corpus(sample: Sample) -> dict[str, str]:
    """The key -> value corpus a ``toy.key_value`` sample carries in its extras."""
    corpus = sample.extras.get("corpus")
    if not isinstance(corpus, Mapping):
        raise ConfigError(f"toy.key_value sample {sample.id!r}: extras['corpus'] must map keys to values")
    return {str(k): str(v) for k, v in corpus.items()}


def _round(sample: Sample) -> int:
    rounds = sample.extras.get("round")
    if not isinstance(rounds, int):
        raise ConfigError(f"toy.key_value sample {sample.id!r}: extras['round'] must be an integer")
    return rounds


def _key_value_oracle(sample: Sample) -> list[Message]:
    """A cold-start conversation: every other sample searches first, the rest guess directly.

    The mixture is deliberate: after SFT the policy calls the tool about half of the time, and
    RL has to discover that searching pays (a guess is right 1 time in 90).
    """
    env = KeyValueEnv(_corpus(sample))
    key, value = sample.extras["key"], sample.answers[0]
    if _round(sample) % 2:  # each key: searched in even rounds, guessed in odd ones
        guess = str(random.Random(sample.id).randint(10, 99))
        return [*env.reset(sample), Message.text("assistant", f"<answer>{guess}</answer>")]
    return [
        *env.reset(sample),
        Message.text("assistant", f"<search>{key}</search>"),
        Message.text("user", f"<information>{value}</information>"),
        Message.text("assistant", f"<answer>{value}</answer>"),
    ]


TASKS.add(
    "toy.digits",
    Task(
        name="toy.digits",
        samples=_digit_samples,
        make_env=lambda s: SingleTurnEnv(_Prompt("Answer with a number.")),
        parse=lambda text: Parsed(text=text),
        reward=digit_fraction,
    ),
)
TASKS.add(
    "toy.length",
    Task(
        name="toy.length",
        samples=_digit_samples,
        make_env=lambda s: SingleTurnEnv(_Prompt("Answer at length.")),
        parse=lambda text: Parsed(text=text),
        reward=text_length,
    ),
)
TASKS.add(
    "toy.key_value",
    Task(
        name="toy.key_value",
        samples=_key_value_samples,
        make_env=lambda s: KeyValueEnv(_corpus(s)),
        parse=parse_answer,
        reward=key_value_answer,
        oracle=_key_value_oracle,
    ),
)
