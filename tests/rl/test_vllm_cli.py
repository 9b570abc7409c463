"""``evidra train rl ... rollout.backend=vllm`` from the command line, on a tiny text policy, in its
own process (make test-vllm): the run trains, checkpoints and reports the sampler mismatch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm")

pytestmark = pytest.mark.vllm


def test_train_rl_with_the_vllm_backend_from_the_cli(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "evidra.cli.main",
        "-q",
        "train",
        "rl",
        "model.path=tiny:qwen2",
        "data.task=toy.digits",
        f"run.output_dir={tmp_path}",
        "run.steps=3",
        "run.batch_size=2",
        "rollout.group_size=4",
        "rollout.max_new_tokens=8",
        "model.lora.enabled=false",
        "algo.kl=none",
        "rollout.backend=vllm",
        "rollout.vllm.max_model_len=512",
        "rollout.vllm.enforce_eager=true",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3
    # the trainer recomputes the old log-probs for another engine and reports how far they were
    assert all(r["mismatch/logp_abs_max"] < 1e-3 for r in rows if "loss" in r)
    assert (tmp_path / "checkpoints" / "step-000003" / "weights.safetensors").is_file()
