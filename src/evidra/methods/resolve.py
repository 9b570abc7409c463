"""From a training config to the method and task the trainer is handed.

``resolve(cfg)`` reads the ``method:`` section (``name`` plus the method's own options).
``task_for(cfg)`` builds the method's task, or the plain task ``data.task`` names when the
config names no method. A former paper task name in ``data.task`` (``lat.colqwen2``) is an error
naming the method section that replaced it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from evidra.core.errors import ConfigError, RegistryError
from evidra.methods.method import METHODS, Method, Resources
from evidra.models.references import check_model_ref
from evidra.rl.run_config import DataConfig, RLConfig, SFTConfig
from evidra.rl.runs.model_card import MethodFacts
from evidra.rl.tasks import Task, plain_task

if TYPE_CHECKING:
    from accelerate import Accelerator

    from evidra.rl.sft.finetune import SFTTrainer
    from evidra.rl.trainer import RLTrainer

# the paper task names data.task took before methods had a section -> the section that replaced each
FORMER_TASKS: dict[str, str] = {
    "lat": "method: {name: lat}",
    "lat.colqwen2": "method: {name: lat, similarity: colqwen2}",
    "lat.rs_grpo": "method: {name: lat, scoped: true}",
    "evisrag": "method: {name: evisrag}",
    "lang2act.stage1": "method: {name: lang2act, stage: 1}",
    "lang2act.stage2": "method: {name: lang2act, stage: 2}",
    "vragrl": "method: {name: vragrl}",
    "cave": "method: {name: cave}",
}


@dataclass(frozen=True)
class Resolved:
    """A method and its checked options: what a run trains and evaluates."""

    method: Method[Any]
    options: object  # an instance of ``method.options``

    def task(self, resources: Resources | None = None) -> Task:
        return self.method.build(self.options, resources or Resources())


def get_method(name: str) -> Method[Any]:
    """The registered method ``name`` (a ``ConfigError`` with a "did you mean" otherwise)."""
    try:
        return METHODS.get(name)
    except RegistryError as exc:
        raise ConfigError(f"method.name: {exc.args[0]}") from None


def resolve_section(section: Mapping[str, object]) -> Resolved:
    """The method ``section["name"]`` with the rest of ``section`` as its options (checked)."""
    name = section.get("name", "")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"method.name must name a method ({', '.join(METHODS.names())}), got {name!r}")
    method = get_method(name)
    return Resolved(method, method.parse_options({k: v for k, v in section.items() if k != "name"}))


def build_task(section: Mapping[str, object], resources: Resources | None = None) -> Task:
    """The task of the method a ``method:`` section names, its options checked first."""
    return resolve_section(section).task(resources)


def method_section(cfg: RLConfig | SFTConfig) -> dict[str, object] | None:
    """The run's method section; None for a plain task."""
    if cfg.data.task in FORMER_TASKS:
        raise ConfigError(
            f"data.task={cfg.data.task!r} was replaced; did you mean {FORMER_TASKS[cfg.data.task]} "
            "(and no data.task)?"
        )
    section = dict(cfg.method)
    if not section.get("name"):
        others = [key for key in section if key != "name"]
        if others:
            raise ConfigError(f"method.{others[0]} needs method.name")
        return None
    if cfg.data.task != DataConfig().task:
        raise ConfigError(
            f"data.task={cfg.data.task!r} and method.name={section['name']!r} both pick what to train; "
            "remove data.task (or remove the method section to train the plain task)"
        )
    return section


def resolve(cfg: RLConfig | SFTConfig) -> Resolved | None:
    """The method ``cfg`` trains, with its checked options; None for a plain task."""
    section = method_section(cfg)
    return None if section is None else resolve_section(section)


def task_for(cfg: RLConfig | SFTConfig, resources: Resources | None = None) -> Task:
    """The task ``cfg`` trains: its method's (built with ``resources``) or its plain task."""
    resolved = resolve(cfg)
    return plain_task(cfg.data.task) if resolved is None else resolved.task(resources)


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


def method_facts(config: Mapping[str, object]) -> MethodFacts | None:
    """The method a run's resolved config (``config.yaml``, read as a plain mapping) trained, as
    an export's model card names it with its paper; None for a plain task or a method not
    registered here."""
    section = config.get("method")
    name = section.get("name") if isinstance(section, Mapping) else None
    if not isinstance(name, str) or name not in METHODS:
        return None
    method = METHODS.get(name)
    return MethodFacts(method.name, method.summary, method.paradigm, method.citation)


def rl_trainer(
    cfg: RLConfig, resources: Resources | None = None, accelerator: Accelerator | None = None
) -> RLTrainer:
    """An ``RLTrainer`` for ``cfg`` on the task of its method (built with ``resources``).

    >>> from evidra.core.config import load_config                                   # doctest: +SKIP
    >>> cfg = load_config(RLConfig, "configs/tiny/lat.yaml", ["run.steps=2"])  # doctest: +SKIP
    >>> rl_trainer(cfg).train()                                                # doctest: +SKIP
    """
    from evidra.rl.trainer import RLTrainer
    from evidra.rl.validate import validate_rl_config

    task = task_for(cfg, resources)  # its options checked; its data is prepared by the trainer
    validate_rl_config(cfg, task)
    check_model_ref(cfg.model.path, "policy model", option="model.path")  # before any data or output
    return RLTrainer(cfg, accelerator, task=task)


def sft_trainer(
    cfg: SFTConfig, resources: Resources | None = None, accelerator: Accelerator | None = None
) -> SFTTrainer:
    """An ``SFTTrainer`` for ``cfg``: on its data file (``data.trajectories``) or on the oracle
    conversations of its method's task."""
    from evidra.rl.sft.finetune import SFTTrainer
    from evidra.rl.validate import validate_sft_config

    validate_sft_config(cfg)
    check_model_ref(cfg.model.path, "policy model", option="model.path")  # before any data or output
    task = None if cfg.data.trajectories else task_for(cfg, resources)
    return SFTTrainer(cfg, accelerator=accelerator, task=task)
