"""``evidra eval --method NAME``: evaluate as a trained method runs and is rewarded.

The method (``evidra.methods.METHODS``) gives everything at once: its paradigm (unless
``--paradigm`` names others), its environment (the one training rolls out in: VRAG-RL's search,
CAVE's zoom), its sample preparation (``Task.from_benchmark``, its page budget) and its reward,
added to every prediction's scores as ``reward`` and ``reward/<component>`` (the names training
logs) by the very reward object a trainer of the method calls. ``--method-option KEY=VALUE``
sets an option of the method, as ``method.KEY=VALUE`` in a recipe.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from evidra.core.errors import ConfigError, InvalidInputError

if TYPE_CHECKING:
    from evidra.core.types import Sample
    from evidra.eval.sample_scoring import Prediction
    from evidra.methods.method import Method
    from evidra.rl.tasks import Task

DEFAULT_MAX_TURNS = 8  # a method's environment ends its episodes itself; this only bounds them


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("a trained method (its paradigm, environment and reward)")
    g.add_argument(
        "--method",
        default=None,
        metavar="NAME",
        help="evaluate as this method runs: its paradigm, environment and reward "
        "(lat, evisrag, lang2act, vragrl, cave, or a method a package registers)",
    )
    g.add_argument(
        "--method-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an option of --method, as method.KEY=VALUE in a recipe (e.g. stage=2)",
    )


@dataclass(frozen=True)
class MethodEval:
    """The resolved method of ``--method`` and the task built from its options."""

    method: Method[Any]
    task: Task

    @property
    def variant(self) -> str:
        return f"method={self.method.name}"

    def samples(self, bench: str, samples: list[Sample], data_path: str | None) -> list[Sample]:
        """The benchmark's samples as the method's task takes them (kept, filled, pages cut)."""
        from evidra.rl.run_config import DataConfig

        if self.task.from_benchmark is not None:
            data = DataConfig(source=bench, path=data_path or ".", size=0)
            samples = self.task.from_benchmark(samples, data)
        return self.task.select_pages(samples) if self.task.select_pages is not None else samples

    def score(self, samples: list[Sample], preds: list[Prediction]) -> list[Prediction]:
        """``preds`` with the method's reward added (after the cache, so cached rows get it too)."""
        from evidra.methods.evaluation import reward_scorer

        scorer = reward_scorer(self.task)
        return [replace(p, scores={**p.scores, **scorer(s, p)}) for s, p in zip(samples, preds, strict=True)]


def parse_method(args: argparse.Namespace) -> MethodEval | None:
    """The method of ``--method`` with its options checked, before any model loads."""
    if args.method is None:
        if args.method_option:
            raise InvalidInputError("--method-option sets an option of --method NAME; pass --method too")
        return None
    from evidra.core.config import apply_overrides
    from evidra.methods import resolve_section

    if args.env is not None:
        raise InvalidInputError("--method brings its own environment; remove --env")
    for option in args.method_option:
        if "=" not in option:
            raise InvalidInputError(f"--method-option {option!r} must look like KEY=VALUE (e.g. stage=2)")
    section = apply_overrides({}, args.method_option)
    try:
        resolved = resolve_section({**section, "name": args.method})
        return MethodEval(resolved.method, resolved.task())
    except ConfigError as exc:  # a recipe's spelling (method.stage=2) said as this command takes it
        raise ConfigError(as_eval_options(str(exc))) from None


_OPTION = re.compile(r"\bmethod\.(\w+)")


def as_eval_options(message: str) -> str:
    """A method's error, which names recipe keys, in this command's options.

    >>> as_eval_options("method.stage must be 1 or 2; set method.stage=1|2 (method.name='x')")
    "--method-option stage must be 1 or 2; set --method-option stage=1|2 (--method 'x')"
    """
    message = message.replace("method.name=", "--method ").replace("method.name", "--method")
    return _OPTION.sub(r"--method-option \1", message)
