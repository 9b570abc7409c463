"""From a training config to the task the trainer is handed.

``method_config(cfg)`` reads the ``method:`` section, with the older spellings mapped onto it:
a former paper task name in ``data.task`` (``TASK_ALIASES``: ``lat.colqwen2`` is
``method: {name: lat, similarity: colqwen2}``), ``data.toolbox``, ``data.index``,
``data.pages_per_question``, ``reward.mode`` and a top-level ``judge:``. An old spelling that
disagrees with the method section is an error, never silently dropped. ``task_for(cfg)`` builds
the method's task, or the plain task ``data.task`` names when no method is set.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from evidra.errors import ConfigError, RegistryError
from evidra.method_config import MethodConfig
from evidra.methods.base import METHODS, Resources
from evidra.rewards.judge_config import JudgeConfig, validate_judge
from evidra.rl.config import DataConfig, RLConfig, SFTConfig
from evidra.rl.tasks import Task, plain_task

# the former task names -> the method section each stands for
TASK_ALIASES: dict[str, dict[str, Any]] = {
    "lat": {"name": "lat"},
    "lat.colqwen2": {"name": "lat", "similarity": "colqwen2"},
    "lat.rs_grpo": {"name": "lat", "scoped": True},
    "evisrag": {"name": "evisrag"},
    "lang2act.stage1": {"name": "lang2act", "stage": 1},
    "lang2act.stage2": {"name": "lang2act", "stage": 2},
    "vragrl": {"name": "vragrl"},
    "cave": {"name": "cave"},
}
_DEFAULT = MethodConfig()


def build_task(cfg: MethodConfig, resources: Resources | None = None) -> Task:
    """The task of the paper method ``cfg.name``, its options checked first (``ConfigError``)."""
    try:
        builder = METHODS.get(cfg.name)
    except RegistryError as exc:
        raise ConfigError(f"method.name: {exc.args[0]}") from None
    return builder(cfg, resources if resources is not None else Resources())


def named_task(name: str, resources: Resources | None = None) -> Task:
    """The task a former task name (``TASK_ALIASES``) or a plain task name stands for."""
    if name in TASK_ALIASES:
        return build_task(MethodConfig(**TASK_ALIASES[name]), resources)
    return plain_task(name)


def _legacy(cfg: RLConfig | SFTConfig) -> dict[str, tuple[str, Any]]:
    """The older spellings set away from their defaults: method field -> (old key, value)."""
    data, old = cfg.data, DataConfig()
    pairs = {
        "toolbox": ("data.toolbox", data.toolbox, old.toolbox),
        "index": ("data.index", data.index, old.index),
        "pages_per_question": ("data.pages_per_question", data.pages_per_question, 0),
        "reward_mode": ("reward.mode", cfg.reward.mode, "paper"),
        "judge": ("judge", cfg.judge, JudgeConfig()),
    }
    return {k: (key, value) for k, (key, value, default) in pairs.items() if value != default}


def method_config(cfg: RLConfig | SFTConfig) -> MethodConfig | None:
    """The run's method section with the older spellings merged in; None for a plain task."""
    validate_judge(cfg.judge)  # a typo in the section fails with its own fix first
    method = cfg.method
    alias = TASK_ALIASES.get(cfg.data.task, {})
    if alias:  # an explicit former task name wins over the method fields it names
        method = dataclasses.replace(method, **alias)
    elif method.name and cfg.data.task != DataConfig().task:
        raise ConfigError(
            f"data.task={cfg.data.task!r} and method.name={method.name!r} both pick what to train; "
            "remove data.task (or set method.name='' to train the plain task)"
        )
    updates: dict[str, Any] = {}
    for field_name, (key, value) in _legacy(cfg).items():
        current = getattr(method, field_name)
        if current != getattr(_DEFAULT, field_name) and current != value:
            raise ConfigError(
                f"{key} and method.{field_name} disagree ({value!r} vs {current!r}); "
                f"keep method.{field_name} only"
            )
        updates[field_name] = value
    if not method.name:
        if updates:
            key = _legacy(cfg)[next(iter(updates))][0]
            raise ConfigError(f"{key} is an option of a paper method; set method.name or remove {key}")
        return None
    return dataclasses.replace(method, **updates)


def task_for(cfg: RLConfig | SFTConfig, resources: Resources | None = None) -> Task:
    """The task ``cfg`` trains: its method's (built with ``resources``) or its plain task."""
    method = method_config(cfg)
    return plain_task(cfg.data.task) if method is None else build_task(method, resources)


def check_config(cfg: RLConfig | SFTConfig) -> Task:
    """Check ``cfg`` whole (method options, then every other section) before anything heavy
    loads; returns the task it trains."""
    from evidra.rl.validate import validate_rl_config, validate_sft_config

    task = task_for(cfg)
    if isinstance(cfg, RLConfig):
        validate_rl_config(cfg, task)
    else:
        validate_sft_config(cfg)
    return task


def rl_trainer(cfg: RLConfig, resources: Resources | None = None, accelerator: Any = None) -> Any:
    """An ``RLTrainer`` for ``cfg`` on the task ``task_for(cfg, resources)`` builds."""
    from evidra.rl.trainer import RLTrainer

    return RLTrainer(cfg, accelerator, task=task_for(cfg, resources))


def sft_trainer(cfg: SFTConfig, resources: Resources | None = None, accelerator: Any = None) -> Any:
    """An ``SFTTrainer`` for ``cfg``: on its data file (``data.trajectories``) or on the oracle
    conversations of the task ``task_for(cfg, resources)`` builds."""
    from evidra.rl.sft import SFTTrainer

    task = None if cfg.data.trajectories else task_for(cfg, resources)
    return SFTTrainer(cfg, accelerator=accelerator, task=task)
