"""Where training scalars go: always a JSONL file, TensorBoard when asked and installed."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from evidra.errors import MissingDependencyError

logger = logging.getLogger(__name__)


class MetricsSink:
    def __init__(
        self,
        output_dir: str | Path,
        *,
        tensorboard: bool = False,
        wandb_project: str = "",
        config: dict[str, Any] | None = None,
        enabled: bool = True,
    ) -> None:
        self.path = Path(output_dir) / "metrics.jsonl"
        self.enabled = enabled
        self._tb: Any = None
        self._wandb: Any = None
        if enabled and wandb_project:
            try:
                import wandb
            except ImportError as exc:
                raise MissingDependencyError("W&B logging needs `pip install 'evidra[wandb]'`") from exc
            self._wandb = wandb.init(project=wandb_project, dir=str(output_dir), config=config or {})
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError as exc:
                raise MissingDependencyError(
                    "TensorBoard logging needs `pip install 'evidra[tensorboard]'`"
                ) from exc
            self._tb = SummaryWriter(str(Path(output_dir) / "tensorboard"))

    def write(self, step: int, metrics: dict[str, float]) -> None:
        if not self.enabled:
            return
        clean = {
            k: (v if isinstance(v, (int, float)) and math.isfinite(v) else None) for k, v in metrics.items()
        }
        with self.path.open("a") as fh:
            fh.write(json.dumps({"step": step, **clean}) + "\n")
        if self._tb is not None:
            for key, value in clean.items():
                if value is not None:
                    self._tb.add_scalar(key, value, step)
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in clean.items() if v is not None}, step=step)

    def truncate_after(self, step: int) -> None:
        """Drop records past ``step`` (after resuming from an earlier checkpoint)."""
        if not self.enabled or not self.path.is_file():
            return
        kept = []
        for line in self.path.read_text().splitlines():
            record = _record(line)
            if record is not None and isinstance(record.get("step"), int) and record["step"] <= step:
                kept.append(line)
        self.path.write_text("".join(ln + "\n" for ln in kept))

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _record(line: str) -> dict[str, Any] | None:
    """One metrics line, or None for a torn or foreign one (a run killed mid-write)."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The records of a metrics file; a torn line (a run killed mid-write) is skipped."""
    return [
        r
        for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
        if line.strip() and (r := _record(line)) is not None
    ]
