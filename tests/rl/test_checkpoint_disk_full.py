"""A disk that fills while a checkpoint is written: one line naming the checkpoint, the folder and
the fix; the previous checkpoint stays intact and the next run resumes from it."""

from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.cli.main import main
from evidra.core.config import load_config
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.checkpoint import list_checkpoints, verify_checkpoint
from evidra.rl.trainer import RLTrainer

ARGS = [
    "model.path=tiny:qwen2_5_vl",
    "run.batch_size=2",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "data.size=4",
    "data.task=toy.length",
    "algo.kl=none",
    "run.save_every=1",
    "run.keep_checkpoints=3",
]


def _full_disk_on_call(monkeypatch: pytest.MonkeyPatch, failing_call: int) -> None:
    """``torch.save`` writes half its bytes then fails as a full disk does, from call ``failing_call``."""
    real = torch.save
    calls = {"n": 0}

    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        calls["n"] += 1
        if calls["n"] < failing_call:
            real(obj, f, *args, **kwargs)
            return
        buffer = io.BytesIO()
        real(obj, buffer)
        Path(f).write_bytes(buffer.getvalue()[: len(buffer.getvalue()) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(torch, "save", save)


def test_a_full_disk_mid_checkpoint_is_one_line_and_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _full_disk_on_call(monkeypatch, failing_call=2)  # step 1 is saved, step 2 fails mid-write
    assert main(["-q", "train", "rl", *ARGS, "run.steps=2", f"run.output_dir={tmp_path}"]) == 2
    full = capsys.readouterr().err
    err = full.strip().splitlines()[-1]  # (library progress bars may precede it in a shared process)
    assert "Traceback" not in full and sum("error" in line for line in full.splitlines()) == 1, full
    assert err.startswith("evidra train rl: error: checkpoint step-000002 could not be written in "), err
    assert "No space left on device" in err and "resumes from step-000001, kept intact" in err
    assert "free disk space or set run.output_dir elsewhere" in err
    (kept,) = list_checkpoints(tmp_path)
    assert kept.name == "step-000001"
    verify_checkpoint(kept)  # every file matches its checksum
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["step-000001"]  # no .tmp left
    monkeypatch.undo()
    resumed = RLTrainer(load_config(RLConfig, None, [*ARGS, "run.steps=2", f"run.output_dir={tmp_path}"]))
    assert resumed.state.step == 1


def test_a_failure_that_is_no_write_error_is_not_renamed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any, **kwargs: Any) -> None:
        raise KeyError("a bug, not a disk")

    monkeypatch.setattr(torch, "save", broken)
    trainer = RLTrainer(load_config(RLConfig, None, [*ARGS, "run.steps=1", f"run.output_dir={tmp_path}"]))
    with pytest.raises(KeyError):
        trainer.train()
    assert list_checkpoints(tmp_path) == [] and not list((tmp_path / "checkpoints").glob(".tmp-*"))


@pytest.mark.slow
@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_FSIZE and SIGXFSZ as on Linux")
def test_the_real_writers_failing_on_a_size_limit_end_in_one_line(tmp_path: Path) -> None:
    """No patching: the process may not write files beyond a size (as a full disk refuses bytes),
    so torch's and safetensors' own writers fail, with their own exception types."""
    out = tmp_path / "run"
    first = subprocess.run(
        [
            sys.executable,
            "-m",
            "evidra.cli.main",
            "-q",
            "train",
            "rl",
            *ARGS,
            "run.steps=1",
            f"run.output_dir={out}",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert first.returncode == 0, first.stderr[-2000:]
    size = max(f.stat().st_size for f in (out / "checkpoints" / "step-000001").iterdir())
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
        resource.setrlimit(resource.RLIMIT_FSIZE, ({size // 2}, {size // 2}))
        from evidra.cli.main import main
        sys.exit(main(sys.argv[1:]))
    """)
    second = subprocess.run(
        [sys.executable, "-c", script, "-q", "train", "rl", *ARGS, "run.steps=2", f"run.output_dir={out}"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    err = second.stderr.strip().splitlines()
    assert second.returncode == 2 and len(err) == 1, second.stderr[-2000:]
    assert err[0].startswith("evidra train rl: error: checkpoint step-000002 could not be written"), err[0]
    assert "resumes from step-000001, kept intact" in err[0]
    (kept,) = list_checkpoints(out)
    verify_checkpoint(kept)
    assert not list((out / "checkpoints").glob(".tmp-*"))
