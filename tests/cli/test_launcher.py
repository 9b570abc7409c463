"""``evidra train --processes N``: a failed launch is one line naming the cause and its fix (the
failing process's own error), the launcher's whole report kept in the log file that line names.
The processes here are small scripts that write what a failing ``accelerate launch`` writes; one
slow test runs the real launcher on two CPU processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import evidra.cli._launcher as launcher
from evidra.cli._launcher import child_argv, launch_command, run_launched
from evidra.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
CAUSE = "model.path: no policy model folder '/nowhere'; pass an existing checkpoint folder (with config.json)"
# what two processes and torch's elastic agent write to stderr when rank 1 fails (shortened)
FAILING = textwrap.dedent(
    f"""
    import sys
    err = sys.stderr
    err.write("train rl: 0/2 steps (0%)\\n")
    err.write("[rank 1] evidra train rl: error: {CAUSE}\\n")
    err.write("[rank 0] evidra train rl: error: {CAUSE}\\n")
    err.write("W1129 08:59:12.665000 9652 torch/distributed/elastic/multiprocessing/api.py:1028] "
              "Sending process 9655 closing signal SIGTERM\\n")
    err.write("Traceback (most recent call last):\\n")
    for n in range(20):
        err.write(f'  File "launch.py", line {{n}}, in main\\n')
    err.write("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \\n")
    for n in range(18):
        err.write(f"  rank      : {{n}} (local_rank: {{n}})\\n")
    print("stdout passes through")
    sys.exit(1)
    """
)
CRASHING = textwrap.dedent(
    """
    import sys
    sys.stderr.write("train rl: 1/2 steps (50%)\\n")
    sys.stderr.write("Traceback (most recent call last):\\n")
    sys.stderr.write('  File "trainer.py", line 3, in step\\n')
    sys.stderr.write("ValueError: shapes (2, 3) and (4,) do not match\\n")
    sys.exit(1)
    """
)


def test_a_failure_is_its_cause_and_only_the_lines_before_it_are_shown(tmp_path: Path) -> None:
    shown: list[str] = []
    log = tmp_path / "logs" / "launch.log"
    outcome = run_launched([sys.executable, "-c", FAILING], log, shown.append)
    assert outcome.status == 1 and outcome.cause == CAUSE
    assert shown == ["train rl: 0/2 steps (0%)"]
    kept = log.read_text().splitlines()
    assert len(kept) == 44 and kept[1].startswith("[rank 1] evidra train rl: error:")


def test_a_crash_without_an_evidra_error_is_its_exception_line(tmp_path: Path) -> None:
    shown: list[str] = []
    outcome = run_launched([sys.executable, "-c", CRASHING], tmp_path / "launch.log", shown.append)
    assert outcome == launcher.Outcome(1, "ValueError: shapes (2, 3) and (4,) do not match")
    assert shown == ["train rl: 1/2 steps (50%)"]


def test_a_run_that_succeeds_has_no_cause(tmp_path: Path) -> None:
    shown: list[str] = []
    ok = "import sys; sys.stderr.write('train rl: 2/2 steps (100%)\\n')"
    assert run_launched(
        [sys.executable, "-c", ok], tmp_path / "launch.log", shown.append
    ) == launcher.Outcome(0, None)
    assert shown == ["train rl: 2/2 steps (100%)"]


def test_train_processes_prints_one_line_naming_the_cause_and_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    seen: list[list[str]] = []

    def fake_launch(processes: int, argv: list[str]) -> list[str]:
        seen.append([str(processes), *argv])
        return [sys.executable, "-c", FAILING]

    monkeypatch.setattr(launcher, "launch_command", fake_launch)
    out = tmp_path / "run"
    argv = ["train", "rl", "--processes", "2", "--config", "configs/tiny/lat.yaml", f"run.output_dir={out}"]
    monkeypatch.chdir(ROOT)
    assert main(argv) == 2
    captured = capfd.readouterr()
    log = out / "logs" / "launch.log"
    assert captured.err.splitlines()[-2:] == [
        "train rl: 0/2 steps (0%)",
        f"evidra train rl: error: {CAUSE} (the output of every process: {log})",
    ]
    assert captured.out == "stdout passes through\n"
    assert seen == [["2", "train", "rl", "--config", "configs/tiny/lat.yaml", f"run.output_dir={out}"]]
    assert log.is_file()


def test_the_launched_command_is_accelerate_s_with_every_value_set() -> None:
    from accelerate.commands.launch import launch_command_parser

    args = build_parser().parse_args(
        ["-q", "train", "sft", "--processes", "4", "--config", "c.yaml", "a.b=1"]
    )
    assert args.processes == 4
    command = launch_command(4, child_argv(args))
    parsed = launch_command_parser().parse_args(command[3:])
    assert parsed.num_processes == 4 and parsed.module and parsed.training_script == "evidra.cli.main"
    assert parsed.training_script_args == ["-q", "train", "sft", "--config", "c.yaml", "a.b=1"]
    assert all(
        getattr(parsed, name) is not None for name in ("num_machines", "mixed_precision", "dynamo_backend")
    )


def test_processes_below_one_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "rl", "--processes", "0"]) == 2
    assert "--processes must be 1 or more, got 0" in capsys.readouterr().err


@pytest.mark.slow
def test_a_real_two_process_launch_that_fails_prints_one_line(tmp_path: Path) -> None:
    """Both processes refuse a model folder that does not exist (checked in each, after the launch)."""
    out = tmp_path / "run"
    argv = ["train", "rl", "--processes", "2", "--config", "configs/tiny/lat.yaml"]
    argv += [f"run.output_dir={out}", "model.path=/nowhere/ckpt"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "evidra.cli.main", *argv], cwd=ROOT, env=env, capture_output=True, timeout=600
    )
    lines = proc.stderr.decode().splitlines()
    log = out / "logs" / "launch.log"
    assert proc.returncode == 2 and len(lines) == 1, lines
    assert lines[0].startswith("evidra train rl: error: model.path: no policy model folder '/nowhere/ckpt'")
    assert lines[0].endswith(f"(the output of every process: {log})")
    assert "ChildFailedError" in log.read_text()
