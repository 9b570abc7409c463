from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch


@pytest.mark.slow
def test_two_cpu_processes_hold_identical_weights_after_a_step(tmp_path: Path) -> None:
    script = Path(__file__).with_name("ddp_step.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in (0, 1)]
    assert all(r["world"] == 2 for r in ranks)
    assert set(ranks[0]["samples"]).isdisjoint(ranks[1]["samples"]), "each rank must get its own prompts"
    for name, value in ranks[0]["after"].items():
        assert torch.equal(value, ranks[1]["after"][name]), f"ranks disagree on {name}"
    moved = [n for n, v in ranks[0]["after"].items() if not torch.equal(v, ranks[0]["before"][n])]
    assert moved, "the step must change the weights"


@pytest.mark.slow
@pytest.mark.parametrize("sharding", ["fsdp2", "zero3"])
def test_sharded_training_on_two_cpu_processes_resumes_exactly_and_matches_ddp(
    tmp_path: Path, sharding: str
) -> None:
    """FSDP2 (fully_shard over gloo) and DeepSpeed ZeRO-3: bf16 compute with fp32 sharded
    masters, a sharded KL reference, sharded checkpoints, and SFT; see sharded_steps.py."""
    if sharding == "zero3":
        pytest.importorskip("deepspeed", reason="ZeRO-3 needs the deepspeed extra (in .[dev])")
    script = Path(__file__).with_name("sharded_steps.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(script),
        str(tmp_path),
        sharding,
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = torch.load(tmp_path / "result.pt", weights_only=False)
    assert r["world"] == 2 and r["resumed_from"] == 2
    assert 0.45 <= r["held_fraction"] <= 0.55, r["held_fraction"]  # each of 2 processes holds half
    # a run killed after its step-2 checkpoint and resumed is the uninterrupted run, bit for bit
    assert r["cut"] == r["full"]
    assert set(r["cut_weights"]) == set(r["full_weights"])
    for name, value in r["full_weights"].items():
        assert torch.equal(value, r["cut_weights"][name]), name
    # One fp32 step sharded equals the DDP step up to float summation order. AdamW's first step
    # moves each weight by lr * g / (|g| + eps) (lr 1e-2 here): where |g| is near eps (1e-8, the
    # attention biases), the processes' different summation orders move it by up to ~1e-5 (seen:
    # 6.5e-6 and 1.1e-5 for two ways of taking the log-probs); a wrong sign or a missing gradient
    # anywhere moves it by ~1e-2.
    moved = 0
    for name, value in r["ddp_weights"].items():
        assert torch.allclose(value, r["sharded_weights"][name], atol=1e-4, rtol=0), name
        moved += int(not torch.equal(value, r["start_weights"][name]))
    assert moved > len(r["ddp_weights"]) // 2, "the step must change the weights"
    assert len(r["sft"]) == 2 and r["sft"][1] < r["sft"][0]


def _cli_on_two_processes(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "evidra.cli.main",
        "train",
        "rl",
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp_path}",
        "rollout.group_size=2",
        "rollout.max_new_tokens=4",
        "data.size=4",
        "model.lora.r=4",
        *overrides,
    ]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_under_a_launcher_only_the_main_process_prints(tmp_path: Path) -> None:
    """`evidra train rl` on two processes: one bar and one metrics line, rank 1's log in its file;
    an error both ranks hit is two whole lines, each with its rank."""
    proc = _cli_on_two_processes(tmp_path, "run.steps=2", "run.batch_size=2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("metrics: ") == 1, proc.stdout
    # one bar (without a terminal it writes plain lines): the last step's line once, not once a rank
    assert proc.stderr.count("train rl: 2/2 steps (100%)") == 1, proc.stderr[-3000:]
    assert proc.stderr.count("INFO evidra.models.loading: loaded qwen2_5_vl") == 1, proc.stderr[-3000:]
    assert "INFO evidra.models.loading: loaded qwen2_5_vl" in (tmp_path / "logs" / "rank-1.log").read_text()
    assert not (tmp_path / "logs" / "rank-0.log").exists()

    proc = _cli_on_two_processes(tmp_path / "odd", "run.steps=1", "run.batch_size=3")
    assert proc.returncode != 0
    errors = [line for line in proc.stderr.splitlines() if "evidra train rl: error:" in line]
    assert sorted(line.split("]")[0] for line in errors) == ["[rank 0", "[rank 1"], proc.stderr[-3000:]
    for line in errors:  # each whole: prefix, command, the message through its fix, nothing glued
        assert re.fullmatch(
            r"\[rank [01]\] evidra train rl: error: run\.batch_size=3 is the global number "
            r"of prompts .* processes; use a multiple of 2",
            line,
        ), line
