"""The ``accelerate launch`` commands evidra documents pass every value accelerate otherwise
fills in with a five-line warning about defaults (checked with accelerate's own parser)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

import evidra.cli.train
from evidra.cli._help import EXAMPLES

# what ``accelerate launch`` warns about when neither the command nor a config file sets it
DEFAULTED = ("num_machines", "mixed_precision", "dynamo_backend", "num_processes")
ROOT = Path(__file__).resolve().parents[2]


def _documented() -> list[str]:
    examples = [e for group in EXAMPLES.values() for e in group if e.startswith("accelerate launch")]
    doc = (evidra.cli.train.__doc__ or "").replace("\\\n", " ")
    examples += [line.strip() for line in doc.splitlines() if line.strip().startswith("accelerate launch")]
    return examples


def test_the_train_docs_and_help_show_a_launch_command() -> None:
    assert len(_documented()) >= 2


@pytest.mark.parametrize("command", _documented())
def test_a_documented_launch_sets_every_value_accelerate_would_warn_about(command: str) -> None:
    from accelerate.commands.launch import launch_command_parser

    argv = shlex.split(command)[2:]  # after "accelerate launch"
    args = launch_command_parser().parse_args(argv)
    assert args.module and args.training_script == "evidra.cli.main", command
    if args.config_file is None:
        missing = [name for name in DEFAULTED if getattr(args, name) is None]
        assert not missing, f"{command}: accelerate warns about defaults for {missing}"
    assert shlex.split(command)[shlex.split(command).index("-m") + 2] == "train"


@pytest.mark.slow
def test_a_two_process_launch_prints_the_bar_and_the_metrics_line_only(tmp_path: Path) -> None:
    """The train docs' command as a user runs it (``--multi_gpu`` starts the two processes on a
    machine without GPUs): no launcher warning, rank 0's lines on stderr, rank 1's in its log."""
    command = next(c for c in _documented() if "configs/tiny/" in c)
    argv = shlex.split(command)[2:]
    argv = [*argv, f"run.output_dir={tmp_path / 'run'}", "run.steps=2", "data.size=4"]
    # a cold start is built by one process (tests/rl/test_cold_start.py); here RL starts from the base
    argv = ["--multi_gpu", *argv, "model.cold_start.steps=0"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    launch = [sys.executable, "-m", "accelerate.commands.launch", *argv]
    proc = subprocess.run(launch, cwd=ROOT, env=env, capture_output=True, timeout=600)
    err = proc.stderr.decode()
    assert proc.returncode == 0, err[-3000:]
    lines = err.splitlines()
    assert "defaults used instead" not in err and "\r" not in err
    assert len(lines) <= 5, lines  # a log line or two, then the bar's plain lines
    assert any(line.startswith("train rl: 2/2 steps (100%)") for line in lines), lines
    assert "metrics: " in proc.stdout.decode()
    assert (tmp_path / "run" / "logs" / "rank-1.log").is_file()
