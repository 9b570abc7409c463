"""Kill -9 a training run at random moments, resume it each time, and compare with a run never
killed: the metrics of every step and the final weights must be the same.

Kills land anywhere: while the model loads, during a rollout, in the middle of writing a
checkpoint, before the first checkpoint exists. Prints how many kills the run survived.

    python benchmarks/kill_resume.py --kills 20 --steps 12
"""

from __future__ import annotations

import argparse
import atexit
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from evidra.rl.runs.checkpoint import list_checkpoints, load_trainable_weights
from evidra.safeio.sink import read_metrics


def _launch(out: Path, steps: int) -> subprocess.Popen[bytes]:
    args = [
        "model.path=tiny:qwen2_5_vl",
        f"run.steps={steps}",
        "run.save_every=1",
        "run.batch_size=2",
        "rollout.group_size=3",
        "rollout.max_new_tokens=6",
        "optim.lr=1e-3",
        "data.task=toy.length",
        "run.keep_checkpoints=2",
        f"run.output_dir={out}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "evidra.cli.main", "-q", "train", "rl", *args]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    root = Path(tempfile.mkdtemp(prefix="evidra-kills-"))
    atexit.register(shutil.rmtree, root, True)  # checkpoints and data of this run only
    start = time.perf_counter()
    whole = _launch(root / "whole", args.steps)
    assert whole.wait() == 0, whole.stderr.read().decode()[-2000:] if whole.stderr else ""
    full_s = time.perf_counter() - start
    print(f"uninterrupted run: {args.steps} steps in {full_s:.1f} s")
    want = read_metrics(root / "whole" / "metrics.jsonl")
    reference = load_trainable_weights(list_checkpoints(root / "whole")[-1])
    kills = launches = cycles = 0
    failures: list[str] = []
    while kills < args.kills:  # each cycle: a fresh run killed until it completes, then compared
        cycles += 1
        out = root / f"killed-{cycles}"
        while True:
            proc = _launch(out, args.steps)
            launches += 1
            try:
                proc.wait(timeout=rng.uniform(0.1, 0.9) * full_s)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                continue
            if proc.returncode != 0:
                err = proc.stderr.read().decode() if proc.stderr else ""
                raise SystemExit(f"a resumed run failed:\n{err[-2000:]}")
            break
        got = read_metrics(out / "metrics.jsonl")
        same_metrics = [m["step"] for m in got] == list(range(1, args.steps + 1)) and all(
            abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["reward/mean"] - b["reward/mean"]) < 1e-9
            for a, b in zip(got, want, strict=True)
        )
        final = load_trainable_weights(list_checkpoints(out)[-1])
        same_weights = final.keys() == reference.keys() and all(
            torch.equal(final[k], reference[k]) for k in final
        )
        print(
            f"cycle {cycles}: {kills} kills so far; metrics identical {same_metrics}, weights identical "
            f"{same_weights}"
        )
        if not (same_metrics and same_weights):
            failures.append(out.name)
    print(f"{kills} kills over {launches} launches in {cycles} runs; runs that differ: {failures or 'none'}")
    print(f"RESULT kills={kills} runs={cycles} differing_runs={len(failures)}")


if __name__ == "__main__":
    main()
