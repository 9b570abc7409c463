"""What the rows of ``gpu_suite.py`` share: the row context, the table entry, skipping, timing.

Each row runs in its own worker process (``gpu_suite.py --worker NAME``) and returns a
``RowOutput``: table entries (one line each) and the values its RESULT keys take. A row that
cannot run here raises ``Skip`` with the reason; any other exception fails the row.

Not a script: imported by ``gpu_suite.py`` and its row modules (``benchmarks/`` on ``sys.path``).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


class Skip(Exception):
    """The row cannot run here (a missing package, no GPU); the message says why."""


@dataclass(frozen=True)
class Ctx:
    """Where and how big a row runs: ``dry`` is the CPU run with tiny shapes."""

    dry: bool
    workdir: Path  # shared by the rows of one suite run (the checkpoint lives here)

    @property
    def device(self) -> str:
        return "cpu" if self.dry else "cuda"

    @property
    def checkpoint(self) -> Path:
        """The random Qwen2.5-VL checkpoint the ``build`` row writes and the model rows read."""
        return self.workdir / "qwen2_5_vl"


@dataclass(frozen=True)
class Entry:
    """One line of the table; ``nan`` / empty cells print as ``-``."""

    name: str
    device: str = ""
    ms_query: float = float("nan")  # exact MaxSim: ms per query in a batch of 32
    s_step: float = float("nan")  # training: median seconds per step
    tok_s: float = float("nan")  # generated tokens per second
    peak_mb: float = float("nan")  # peak GPU memory (or RSS on the CPU)
    check: str = ""  # what was verified: agreement, equal ids, loss finite
    note: str = ""


@dataclass
class RowOutput:
    entries: list[Entry] = field(default_factory=list)
    result: dict[str, float | int | str] = field(default_factory=dict)  # RESULT keys this row sets
    ok: bool = True  # False: the row ran, but a check it makes did not hold

    def to_json(self) -> dict[str, Any]:
        return {"entries": [asdict(e) for e in self.entries], "result": self.result, "ok": self.ok}


def device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    return "cpu"


def synced_median(fn: Callable[[], Any], repeats: int, device: str) -> tuple[float, Any]:
    """Median seconds of ``fn`` over ``repeats`` calls after one warm-up, synchronising CUDA."""
    import torch

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    out = fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def peak_growth_mb(fn: Callable[[], Any], device: str) -> float:
    """How far one call of ``fn`` raises the allocated GPU memory (nan off CUDA)."""
    import torch

    if device != "cuda":
        return float("nan")
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - before) / 2**20


class DeviceMemory:
    """Peak memory in use on the GPU while the block runs, sampled every 50 ms from the driver
    (``torch.cuda.mem_get_info``): counts what vLLM allocates outside torch's allocator too.
    Off CUDA, the process's peak resident set size."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.peak = 0
        self._stop = False

    def __enter__(self) -> DeviceMemory:
        if self.device == "cuda":
            import threading

            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def _poll(self) -> None:
        import torch

        while not self._stop:
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak, total - free)
            time.sleep(0.05)

    def __exit__(self, *exc: object) -> None:
        self._stop = True
        if self.device == "cuda":
            self._thread.join()

    @property
    def peak_mb(self) -> float:
        if self.device == "cuda":
            return self.peak / 2**20
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
