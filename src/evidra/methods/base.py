"""What a paper method is: a builder from a typed ``MethodConfig`` and run ``Resources`` to a ``Task``.

A method module (``lat``, ``evisrag``, ``lang2act``, ``vragrl``, ``cave``) registers one builder in
``METHODS``. A builder first checks the options it is given (``check_options``: a one-line
``ConfigError`` for an option the method does not take or a value out of range), then assembles
the task from cheap parts; models a reward needs (a ColQwen2 similarity, an index) load on first
use, so checking a config never loads one.

Run resources that are expensive or shared (a search engine, a judge client, a similarity
model) may be passed in ``Resources``; what is not passed is built from the config.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from evidra.errors import ConfigError, InvalidInputError
from evidra.method_config import MethodConfig
from evidra.registry import Registry
from evidra.rewards.base import check_weights as check_reward_weights
from evidra.rewards.judge_config import build_judge, validate_judge
from evidra.rewards.judge_protocol import Judge
from evidra.rl.tasks import Task
from evidra.types import Sample

__all__ = ["METHODS", "MethodBuilder", "MethodConfig", "Resources", "check_options"]


@dataclass(frozen=True)
class Resources:
    """Services a run hands to a method instead of letting it build them from the config."""

    searcher: Any = None  # a text-to-pages searcher (``search(queries, k)``): vragrl's engine, page ranking
    judge: Judge | None = None  # the answer judge client; None: built from ``method.judge``
    similarity: Any = None  # lat's ``StepSimilarity``; None: from ``method.similarity``


class MethodBuilder(Protocol):
    def __call__(self, cfg: MethodConfig, resources: Resources) -> Task: ...


class _MethodRegistry(Registry[MethodBuilder]):
    """Builders register themselves when their module is imported; the first lookup imports every
    method module of this package, so importing one method never imports the others."""

    _loaded = False

    def _load(self) -> None:
        if not _MethodRegistry._loaded:
            _MethodRegistry._loaded = True
            package = importlib.import_module("evidra.methods")
            for module in pkgutil.iter_modules(package.__path__):
                if not module.name.startswith("_") and module.name not in ("base", "resolve"):
                    importlib.import_module(f"evidra.methods.{module.name}")

    def get(self, name: str) -> MethodBuilder:
        self._load()
        return super().get(name)

    def names(self) -> list[str]:
        self._load()
        return super().names()

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._items


METHODS: _MethodRegistry = _MethodRegistry("method")

_DEFAULT = MethodConfig()
_FIX = {
    "reward_mode": "paper",
    "similarity": "text_overlap",
    "similarity_checkpoint": "''",
    "scoped": "false",
    "stage": "0",
    "judge": "the default (remove the judge section)",
    "toolbox": "''",
    "index": "''",
    "pages_per_question": "0",
    "weights": "{}",
}


def check_options(cfg: MethodConfig, takes: Collection[str]) -> None:
    """A ``ConfigError`` for the first option of ``cfg`` set away from its default that the method
    does not take (``takes``), then for general ranges (page budget, toolbox file)."""
    for f in dataclasses.fields(cfg):
        if f.name != "name" and f.name not in takes and getattr(cfg, f.name) != getattr(_DEFAULT, f.name):
            raise ConfigError(
                f"method.{f.name}={getattr(cfg, f.name)!r} is no option of method {cfg.name!r}; "
                f"set it to {_FIX[f.name]} (options of {cfg.name}: {', '.join(sorted(takes)) or 'none'})"
            )
    k = cfg.pages_per_question
    if k < 0:
        raise ConfigError(f"method.pages_per_question must be >= 0 (0: every page), got {k}")
    validate_judge(cfg.judge)


def check_weights(cfg: MethodConfig, known: Sequence[str]) -> dict[str, float]:
    """``method.weights`` checked against the method's reward components (``known``)."""
    try:
        return check_reward_weights(cfg.weights, known, cfg.name)
    except InvalidInputError as exc:
        raise ConfigError(f"method.weights: {exc}") from None


def method_judge(cfg: MethodConfig, resources: Resources, prompt: str, default: Judge) -> Judge:
    """The answer judge: the one passed in, the configured one, or the method's offline default."""
    if resources.judge is not None:
        return resources.judge
    if cfg.judge.is_default:
        return default
    return build_judge(cfg.judge, prompt)


def load_tools(path: str) -> tuple[Any, ...]:
    """The tools of ``method.toolbox`` (a ``ConfigError`` naming the file when it does not load)."""
    from evidra.paradigms.toolchain import load_toolbox

    try:
        return tuple(load_toolbox(path))
    except InvalidInputError as exc:
        raise ConfigError(f"method.toolbox: {exc}") from None


def page_budget(cfg: MethodConfig, resources: Resources) -> Callable[[list[Sample]], list[Sample]] | None:
    """``Task.select_pages`` for ``method.pages_per_question``: each sample's top pages, ranked by
    the searcher passed in or ``method.index`` (opened on first use), else in the sample's order."""
    k = cfg.pages_per_question
    if k == 0:
        return None

    def select(samples: list[Sample]) -> list[Sample]:
        from evidra.data.pages import top_pages
        from evidra.retrieval.engine import open_searcher

        searcher = resources.searcher or (open_searcher(cfg.index) if cfg.index else None)
        return top_pages(samples, k, searcher)

    return select


def merged_weights(default: Mapping[str, float], cfg: MethodConfig) -> dict[str, float]:
    """The method's default weights with ``method.weights`` over them (checked)."""
    return {**default, **check_weights(cfg, tuple(default))}
