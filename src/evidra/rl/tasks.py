"""Tasks: what to train on. A task bundles a dataset, an environment, a parser and a reward.

The paper recipes register their own tasks (LAT, EVisRAG, ...); the toy tasks here are small
and verifiable, for the trainer's learning checks and for smoke runs on a CPU.
"""

from __future__ import annotations

import logging
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from evidra.cache import private_cache_dir
from evidra.env.base import Environment
from evidra.env.single_turn import SingleTurnEnv
from evidra.env.toy import KeyValueEnv
from evidra.errors import ConfigError
from evidra.registry import Registry
from evidra.rewards.base import RewardFn, RewardResult
from evidra.rewards.judge_config import JudgeConfig, build_judge
from evidra.rewards.judge_protocol import Judge
from evidra.rewards.toy import digit_fraction, key_value_answer, parse_answer, text_length
from evidra.rl.config import DataConfig
from evidra.types import Message, Page, Parsed, Sample, Span, Trajectory

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
    scopes: Callable[[Trajectory, Any], Mapping[str, tuple[Span, ...]]] | None = None  # (traj, tokenizer)
    # (policy VLM, episodes) -> one result per episode: rewards that need the policy model or the
    # environments' infos (CAVE's teacher-forced credits, VRAG-RL's retrieved pages); replaces score
    score_episodes: Callable[[Any, Sequence[Any]], list[RewardResult]] | None = None
    # published-benchmark samples (``data.source``) -> this task's: keep the usable ones, fill
    # what the task needs (``evidra.rl.recipes._benchmark``); None: the task's own data only
    from_benchmark: Callable[[list[Sample], DataConfig], list[Sample]] | None = None
    # generated samples (``data.synthetic``) -> this task's, as ``from_benchmark``; None: not taken
    from_synthetic: Callable[[list[Sample], DataConfig], list[Sample]] | None = None
    # the same task scored with another answer judge (``judge:`` in a config); None: no judge
    with_judge: Callable[[Judge], Task] | None = None
    judge_prompt: str = "vragrl"  # the paper's judge prompt style for this task
    # the same task prompting and scoring with another toolbox (``data.toolbox``, Lang2Act stage 2);
    # takes ``evidra.paradigms.toolchain.Tool`` records; None: the task has no toolbox
    with_toolbox: Callable[[tuple[Any, ...]], Task] | None = None
    # the same task scored with its reward's other variant (``reward.mode``: "paper" or "upstream",
    # the method's released code); None: the task has the paper's reward only
    with_reward_mode: Callable[[str], Task] | None = None
    # shows each question a budget of its top pages (``data.pages_per_question``); tasks that search
    # or label sufficiency from the pages they show leave it False
    ranks_pages: bool = False

    def score(self, sample: Sample, trajectory: Trajectory, parsed: Parsed | None = None) -> RewardResult:
        """Parse the final policy turn and score it (the reward also sees the whole trajectory)."""
        text = trajectory.texts[-1] if trajectory.texts else ""
        return self.reward(self.parse(text) if parsed is None else parsed, sample, trajectory)


def resolve_task(
    name: str, judge: JudgeConfig, data: DataConfig | None = None, reward_mode: str = "paper"
) -> Task:
    """The registered task ``name``, with ``data.toolbox``'s tools when one is given, its reward's
    ``reward_mode`` variant (``reward.mode``), scored with the configured judge when one is
    configured."""
    task = TASKS.get(name)
    if data is not None and data.toolbox:
        from evidra.paradigms.toolchain import load_toolbox

        if task.with_toolbox is None:
            raise ConfigError(f"task {name!r} takes no toolbox; data.toolbox is for lang2act.stage2")
        task = task.with_toolbox(load_toolbox(data.toolbox))
    if reward_mode != "paper":
        if task.with_reward_mode is None:
            raise ConfigError(
                f"task {name!r} has only the paper's reward; remove reward.mode={reward_mode} "
                "(tasks with a released-code variant: evisrag, vragrl)"
            )
        task = task.with_reward_mode(reward_mode)
    if judge.is_default:
        return task
    if task.with_judge is None:
        raise ConfigError(f"task {name!r} judges no answers, so it takes no judge; remove the judge section")
    return task.with_judge(build_judge(judge, task.judge_prompt))


def task_samples(task: Task, cfg: DataConfig) -> list[Sample]:
    """The samples a run trains on: the task's own, or with ``data.source`` a benchmark's.

    Benchmark samples go through ``task.from_benchmark``; more than ``data.size`` of them (when
    it is not 0) are subsampled with ``data.seed``, keeping their order. ``data.subset`` then
    keeps the samples its file keeps, and ``data.pages_per_question`` cuts each sample's pages to
    its top ones (``evidra.data.pages.top_pages``, ranked by ``data.index`` when given).
    """
    samples = _own_or_benchmark(task, cfg)
    samples = _subset(samples, cfg.subset) if cfg.subset else samples
    if cfg.pages_per_question:
        from evidra.data.pages import top_pages
        from evidra.retrieval.engine import open_searcher

        searcher = open_searcher(cfg.index) if cfg.index else None
        samples = top_pages(samples, cfg.pages_per_question, searcher)
    return samples


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
        logger.warning("data.subset: %d kept ids are not among this run's samples (e.g. %r)",
                       len(missing), missing[0])  # fmt: skip
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


class TaskRegistry(Registry[Task]):
    """The task registry; the method recipes (``evidra.rl.recipes``) register themselves the
    first time a task is looked up, so importing a recipe module never imports the others."""

    _loading = False

    def _load_recipes(self) -> None:
        if not TaskRegistry._loading:
            TaskRegistry._loading = True
            from evidra.rl import recipes

            recipes.load_all()

    def get(self, name: str) -> Task:
        if name not in self._items:
            self._load_recipes()
        return super().get(name)

    def names(self) -> list[str]:
        self._load_recipes()
        return super().names()

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self._load_recipes()
        return name in self._items


TASKS: TaskRegistry = TaskRegistry("task")


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


def _key_value_oracle(sample: Sample) -> list[Message]:
    """A cold-start conversation: every other sample searches first, the rest guess directly.

    The mixture is deliberate: after SFT the policy calls the tool about half of the time, and
    RL has to discover that searching pays (a guess is right 1 time in 90).
    """
    env = KeyValueEnv(dict(sample.extras["corpus"]))
    key, value = sample.extras["key"], sample.answers[0]
    if sample.extras["round"] % 2:  # each key: searched in even rounds, guessed in odd ones
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
        make_env=lambda s: KeyValueEnv(dict(s.extras["corpus"])),
        parse=parse_answer,
        reward=key_value_answer,
        oracle=_key_value_oracle,
    ),
)
