"""The paper methods, one registered ``Method`` object each: LAT, EVisRAG, Lang2Act, VRAG-RL, CAVE.

A method is the one place that knows which paradigm, environment, reward, data, table layout,
data-construction steps and judge prompt a paper uses (``evidra.methods.method.Method``). Its
builder turns the method's own typed options (the ``method:`` section of a recipe) and run
``Resources`` into the ``Task`` the trainer is handed:

    cfg = load_config(RLConfig, "configs/tiny/lat.yaml", ["run.steps=2"])
    rl_trainer(cfg).train()                   # RLTrainer(cfg, task=task_for(cfg)).train()

A method outside this package takes everything it needs from ``evidra.methods.api`` and
registers with ``METHODS.add(name, Method(...))``; the command line loads its module with
``evidra --method-module my_pkg.my_method``, an installed package through the ``evidra.methods``
entry-point group (docs/adding-a-method.md). ``evidra.rl`` knows only the
``Task`` record; nothing below this package imports it.
"""

from __future__ import annotations

from evidra.methods._benchmark import IMAGE_QA, adapter
from evidra.methods._synth import synth_samples
from evidra.methods.method import ENTRY_POINT_GROUP, METHODS, Method, Resources, merged_weights
from evidra.methods.resolve import (
    Resolved,
    build_task,
    check_config,
    get_method,
    method_facts,
    method_section,
    resolve,
    resolve_section,
    rl_trainer,
    sft_trainer,
    task_for,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "IMAGE_QA",
    "METHODS",
    "Method",
    "Resolved",
    "Resources",
    "adapter",
    "build_task",
    "check_config",
    "get_method",
    "merged_weights",
    "method_facts",
    "method_section",
    "resolve",
    "resolve_section",
    "rl_trainer",
    "sft_trainer",
    "synth_samples",
    "task_for",
]
