"""``evidra train sft|rl --processes N``: the N training processes started through ``accelerate
launch``, and a failure told in one line.

When a process of an ``accelerate launch`` fails, evidra's own error line (``[rank 1] evidra train
rl: error: ...``, ``cli._ranks``) is followed by the launcher's report: a ``SIGTERM`` warning for
each other process, the traceback of accelerate's launcher and torch's "Root Cause" table (43
lines for two processes, around the one line that says what to fix). Started through evidra, the
launcher's and every process's stderr go to ``<run.output_dir>/logs/launch.log``; the lines before
the first failure are shown as they come (rank 0's progress bar and log lines), the rest only
kept, and a failure ends with one line: the first error a process reported (an ``EvidraError``'s
message: the cause and its fix) or, for a crash, its exception line, with the log's path. Standard
output (rank 0's ``metrics: ...``) passes through untouched.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from evidra.core.errors import EvidraError

MAX_LINE = 1 << 16  # bytes of one stderr line read at a time (a longer one comes in pieces)
# the line ``cli.main`` writes for a failed command: "[rank 1] evidra train rl: error: <message>",
# or "... evidra train rl: ValueError: <first line> (traceback in <log>)" for a crash on rank >= 1
_TOLD = re.compile(r"^(?:\[rank \d+\] )?evidra train \w+: (?:error: )?(?P<cause>.+)$")
# torch's elastic agent (inside ``accelerate launch``) logging a failed or stopped process
_AGENT = re.compile(r"^[WE]\d{4} .*torch/distributed/elastic/")
_TRACEBACK = "Traceback (most recent call last):"


class ProcessesFailed(EvidraError):
    """A launched training process failed; the message is its own error and the log's path."""


@dataclass(frozen=True)
class Outcome:
    """How the launched processes ended: the launcher's exit status and the first cause reported."""

    status: int
    cause: str | None


class _Reader:
    """Sorts the launcher's stderr lines: kept all, shown until the first failure, causes noted."""

    def __init__(self, echo: Callable[[str], None]) -> None:
        self.echo = echo
        self.failed = False
        self.cause: str | None = None  # what a process said (cli.main's error line)
        self.crash: str | None = None  # else the exception line of the first traceback
        self._in_traceback = False

    def take(self, line: str) -> None:
        told = _TOLD.match(line)
        if told is not None and self.cause is None:
            self.cause = told.group("cause")
        if self._in_traceback and line[:1] not in (" ", "\t", "") and self.crash is None:
            self.crash = line
        self._in_traceback = self._in_traceback or line.startswith(_TRACEBACK)
        self.failed = self.failed or told is not None or self._in_traceback or bool(_AGENT.match(line))
        if not self.failed:
            self.echo(line)


def run_launched(
    command: Sequence[str], log: Path, echo: Callable[[str], None], env: dict[str, str] | None = None
) -> Outcome:
    """Run ``command`` (``accelerate launch ...``), writing its whole stderr to ``log`` and handing
    ``echo`` each line until the first failure; its standard output is this process's own."""
    log.parent.mkdir(parents=True, exist_ok=True)
    reader = _Reader(echo)
    with log.open("w", encoding="utf-8") as kept:
        proc = subprocess.Popen(list(command), stderr=subprocess.PIPE, env=env)
        assert proc.stderr is not None  # stderr=PIPE
        try:
            _pump(proc.stderr, kept, reader)
        except BaseException:  # Ctrl-C here, or this process stopped: the launcher stops its processes
            proc.terminate()
            proc.wait()
            raise
        status = proc.wait()
    return Outcome(status, (reader.cause or reader.crash) if status != 0 else None)


def _pump(stream: IO[bytes], kept: IO[str], reader: _Reader) -> None:
    for raw in iter(lambda: stream.readline(MAX_LINE), b""):
        line = raw.decode("utf-8", "replace").rstrip("\r\n")
        kept.write(line + "\n")
        kept.flush()
        reader.take(line)


def launch_command(processes: int, argv: Sequence[str]) -> list[str]:
    """``accelerate launch`` of ``evidra <argv>`` on ``processes`` processes of this machine, with
    every value set that accelerate would otherwise fill in with a warning about its defaults
    (precision and sharding are evidra's own: ``run.precision``, ``run.sharding``)."""
    return [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "evidra.cli.main",
        *argv,
    ]


def child_argv(args: argparse.Namespace) -> list[str]:
    """The ``evidra`` arguments each launched process runs: this command without ``--processes``
    (``--data`` and ``--data-format`` already folded into the overrides by ``train``)."""
    argv = ["-q"] if args.quiet else ["-v"] * int(args.verbose)
    for module in [*args.method_module, *getattr(args, "method_module_after", [])]:
        argv += ["--method-module", module]
    argv += ["train", args.mode]
    if args.config:
        argv += ["--config", str(args.config)]
    if args.export:
        argv += ["--export", str(args.export)]
    return [*argv, *args.overrides]


def train_on_processes(args: argparse.Namespace, output_dir: str | Path) -> int:
    """Run this ``train`` command on ``args.processes`` processes; ``ProcessesFailed`` (one line: the
    cause and the log's path) when they fail."""
    log = Path(output_dir) / "logs" / "launch.log"
    outcome = run_launched(launch_command(args.processes, child_argv(args)), log, _to_stderr)
    if outcome.status == 0:
        return 0
    cause = outcome.cause or f"the training processes ended with exit status {outcome.status}"
    raise ProcessesFailed(f"{cause} (the output of every process: {log})")


def _to_stderr(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()
