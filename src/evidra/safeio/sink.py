"""Where training scalars go: always ``metrics.jsonl``; TensorBoard and W&B when ``run.report_to`` names them.

A destination beyond the JSONL file is a ``Reporter`` in ``REPORTERS``: the extra that installs
it, a ``load`` that imports its library, and an ``open`` that starts its writer. ``check_report_to``
imports every named library, so a training config naming one that is not installed fails in
one line naming the extra while the config is checked, before any model loads.

>>> check_report_to(["jsonl"])
>>> check_report_to(["tensorbord"])
Traceback (most recent call last):
...
evidra.core.errors.ConfigError: run.report_to: unknown ... 'tensorbord'; did you mean 'tensorboard'? ...
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from evidra.core.errors import ConfigError, MissingDependencyError, RegistryError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.registry import Registry
from evidra.safeio.jsonfiles import read_lines

if TYPE_CHECKING:
    from torch.utils.tensorboard import SummaryWriter

logger = logging.getLogger(__name__)

JSONL = "jsonl"  # always written: resuming trims it and export reads its last record
DEFAULT_WANDB_PROJECT = "evidra"


@dataclass(frozen=True)
class SinkSettings:
    """What a reporter needs to start: the run folder, the W&B project and the run's config."""

    output_dir: Path
    wandb_project: str = ""
    config: dict[str, object] | None = None


class ScalarWriter(Protocol):
    def log(self, step: int, scalars: dict[str, float]) -> None: ...

    def close(self) -> None: ...


L = TypeVar("L")  # what a reporter's ``load`` gives: its library, a module or a writer class


@dataclass(frozen=True)
class Reporter(Generic[L]):
    """A destination of ``run.report_to``; ``extra`` is the ``pip install 'evidra[EXTRA]'`` it needs."""

    extra: str
    load: Callable[[], L]  # the library (raises ImportError when it is not installed)
    open: Callable[[L, SinkSettings], ScalarWriter]


REPORTERS: Registry[Reporter[Any] | None] = Registry("report_to destination")
REPORTERS.add(JSONL, None)  # MetricsSink writes it itself


def _load_tensorboard() -> type[SummaryWriter]:
    from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

    return SummaryWriter


class _TensorBoard:
    def __init__(self, summary_writer: type[SummaryWriter], settings: SinkSettings) -> None:
        self._writer = summary_writer(str(settings.output_dir / "tensorboard"))

    def log(self, step: int, scalars: dict[str, float]) -> None:
        for key, value in scalars.items():
            self._writer.add_scalar(key, value, step)

    def close(self) -> None:
        self._writer.close()


def _load_wandb() -> ModuleType:
    import wandb

    return wandb


class _WandB:
    def __init__(self, wandb: ModuleType, settings: SinkSettings) -> None:
        project = settings.wandb_project or DEFAULT_WANDB_PROJECT
        self._run = wandb.init(project=project, dir=str(settings.output_dir), config=settings.config or {})

    def log(self, step: int, scalars: dict[str, float]) -> None:
        self._run.log(scalars, step=step)

    def close(self) -> None:
        self._run.finish()


REPORTERS.add("tensorboard", Reporter("tensorboard", _load_tensorboard, _TensorBoard))
REPORTERS.add("wandb", Reporter("wandb", _load_wandb, _WandB))


def _reporter(name: str) -> Reporter[Any] | None:
    try:
        return REPORTERS.get(name)
    except RegistryError as exc:
        raise ConfigError(f"run.report_to: {exc.args[0]}") from None


def _library(name: str, reporter: Reporter[L]) -> L:
    try:
        return reporter.load()
    except ImportError as exc:
        raise MissingDependencyError(
            f"run.report_to names {name}, which is not installed: pip install 'evidra[{reporter.extra}]' "
            f"(or remove {name} from run.report_to)"
        ) from exc


def check_report_to(report_to: Sequence[str]) -> None:
    """Every destination is known and its library installed (one-line errors otherwise)."""
    for name in report_to:
        reporter = _reporter(name)
        if reporter is not None:
            _library(name, reporter)


class MetricsSink:
    """Writes one JSONL line of scalars per step, and hands them to each ``report_to`` destination.

    ``enabled=False`` (every process but the main one) writes nothing and starts nothing."""

    def __init__(
        self,
        output_dir: str | Path,
        *,
        report_to: Sequence[str] = (JSONL,),
        wandb_project: str = "",
        config: dict[str, object] | None = None,
        enabled: bool = True,
    ) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.enabled = enabled
        self._writers: list[ScalarWriter] = []
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        settings = SinkSettings(Path(output_dir), wandb_project, config)
        for name in dict.fromkeys(report_to):  # each once, in the order given
            reporter = _reporter(name)
            if reporter is not None:
                self._writers.append(reporter.open(_library(name, reporter), settings))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        clean = {
            k: (v if isinstance(v, (int, float)) and math.isfinite(v) else None) for k, v in metrics.items()
        }
        with self.path.open("a") as fh:
            fh.write(json.dumps({"step": step, **clean}) + "\n")
        scalars = {k: v for k, v in clean.items() if v is not None}
        for writer in self._writers:
            writer.log(step, scalars)

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (after resuming from an earlier checkpoint)."""
        if not self.enabled or not self.path.is_file():
            return
        kept = []
        for _, raw in read_lines(self.path, "metrics file"):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            record = _record(line)
            if record is not None and isinstance(at := record.get("step"), int) and at <= step:
                kept.append(line)
        self.path.write_text("".join(ln + "\n" for ln in kept))

    def close(self) -> None:
        for writer in self._writers:
            writer.close()


def _record(line: str) -> JSONObject | None:
    """One metrics line, or None for a torn or foreign one (a run killed mid-write)."""
    try:
        record: JSON = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def read_metrics(path: str | Path) -> list[JSONObject]:
    """The records of a metrics file; a torn line (a run killed mid-write) is skipped."""
    lines = (raw.decode("utf-8", errors="replace") for _, raw in read_lines(path, "metrics file"))
    return [r for line in lines if (r := _record(line)) is not None]
