"""The five paper methods, one module each: LAT, EVisRAG, Lang2Act, VRAG-RL and CAVE.

A method is the one place that knows which paradigm, environment, reward and data a paper
uses. Its builder (registered in ``METHODS``) turns a typed ``MethodConfig`` (the ``method:``
section of a training config) and run ``Resources`` into the ``Task`` the trainer is handed:

    cfg = load_config(RLConfig, "configs/lat.yaml", ["model.path=..."])
    RLTrainer(cfg, task=task_for(cfg)).train()      # or rl_trainer(cfg)

``evidra.rl`` knows only the ``Task`` record; nothing below this package imports it.
"""

from __future__ import annotations

from evidra.methods.base import METHODS, MethodConfig, Resources
from evidra.methods.resolve import (
    TASK_ALIASES,
    build_task,
    check_config,
    method_config,
    named_task,
    rl_trainer,
    sft_trainer,
    task_for,
)

__all__ = [
    "METHODS",
    "TASK_ALIASES",
    "MethodConfig",
    "Resources",
    "build_task",
    "check_config",
    "method_config",
    "named_task",
    "rl_trainer",
    "sft_trainer",
    "task_for",
]
