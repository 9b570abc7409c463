"""GRPO step time: evidra vs TRL's GRPOTrainer on the same tiny Qwen2.5-VL, in one run.

Setting (both engines): 8 prompts x G=4 completions per step, up to 32 new tokens, one
224x224 image per prompt, KL to a frozen reference (beta 0.04, k3 in the loss), token-mean loss,
clip 0.2, full fine-tuning in fp32, AdamW, one thread. Each engine runs in its own process so
peak memory (max RSS) is its own; the first step is warm-up and not timed.

    OMP_NUM_THREADS=1 python benchmarks/grpo_step.py --steps 4

Needs ``pip install trl`` for the peer (``pip install 'evidra[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

PROMPTS, GROUP, NEW_TOKENS, BETA, LR = 8, 4, 32, 0.04, 1e-5
TRAIN_VISION = os.environ.get("BENCH_TRAIN_VISION") == "1"  # default: vision tower frozen in both


def _setup(workdir: Path) -> tuple[Path, list[Path]]:
    import numpy as np
    from PIL import Image

    from evidra.models.tiny import build_tiny

    model = build_tiny("qwen2_5_vl", workdir / "model")
    rng = np.random.default_rng(0)
    images = []
    for i in range(PROMPTS):
        path = workdir / f"img{i}.png"
        Image.fromarray(rng.integers(0, 255, (224, 224, 3), dtype=np.uint8)).save(path)
        images.append(path)
    return model, images


def _question(i: int) -> str:
    return f"Describe region {i} of the page and give its total."


def _length_reward(text: str) -> float:
    return min(1.0, len(text) / 100)


def run_evidra(workdir: Path, steps: int) -> list[float]:
    from evidra.config import load_config
    from evidra.paradigms import Direct
    from evidra.rewards.base import RewardResult
    from evidra.rl.config import RLConfig
    from evidra.rl.tasks import TASKS, Task
    from evidra.rl.trainer import RLTrainer
    from evidra.types import Page, Parsed, Sample

    model, images = _setup(workdir)
    samples = [
        Sample(id=f"b{i}", question=_question(i), pages=(Page(f"img{i}-p0001", str(p), 224, 224),))
        for i, p in enumerate(images)
    ]
    from evidra.env import SingleTurnEnv

    TASKS.add("bench.image_length", Task(
        name="bench.image_length", samples=lambda cfg: samples, make_env=lambda s: SingleTurnEnv(Direct()),
        parse=lambda text: Parsed(text=text),
        reward=lambda parsed, sample, traj=None: RewardResult(total=_length_reward(parsed.text)),
    ), overwrite=True)  # fmt: skip
    cfg = load_config(RLConfig, None, [
        f"model.path={model}", f"run.output_dir={workdir / 'run'}", f"run.steps={steps + 1}",
        f"run.batch_size={PROMPTS}", f"run.micro_batch_size={PROMPTS * GROUP}", f"rollout.group_size={GROUP}",
        f"rollout.max_new_tokens={NEW_TOKENS}", "rollout.temperature=1.0", "model.lora.enabled=false",
        "algo.kl=loss", f"algo.kl_coef={BETA}", "algo.kl_estimator=k3",
        "algo.loss_agg=token-mean", f"optim.lr={LR}", "data.task=bench.image_length", "run.save_every=0",
        "run.resume=false",
    ])  # fmt: skip
    times: list[float] = []
    trainer = RLTrainer(cfg)
    last = time.perf_counter()

    def on_step(step: int, metrics: dict[str, float]) -> None:
        nonlocal last
        now = time.perf_counter()
        times.append(now - last)
        last = now

    trainer.cfg = cfg
    trainer.train(on_step)
    return times[1:]


def run_trl(workdir: Path, steps: int) -> list[float]:
    from datasets import Dataset
    from PIL import Image
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from evidra.models.loading import load_processor

    model, images = _setup(workdir)
    rows = [
        {
            "prompt": [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": _question(i)}]}
            ],
            "image": Image.open(p).convert("RGB"),
        }
        for i, p in enumerate(images)
    ]
    dataset = Dataset.from_list(rows)
    processor = load_processor(model, "qwen2_5_vl")

    def reward(completions: list[Any], **_: Any) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [_length_reward(t) for t in texts]

    args = GRPOConfig(
        output_dir=str(workdir / "trl"), per_device_train_batch_size=PROMPTS * GROUP, num_generations=GROUP,
        max_completion_length=NEW_TOKENS, beta=BETA, learning_rate=LR, loss_type="dapo", epsilon=0.2,
        max_steps=steps + 1, use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        report_to=[], logging_steps=1, save_strategy="no", temperature=1.0, seed=0, dataloader_num_workers=0,
    )  # fmt: skip
    times: list[float] = []

    class Timer(TrainerCallback):  # type: ignore[misc]
        def __init__(self) -> None:
            self.last = 0.0

        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.last = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            times.append(time.perf_counter() - self.last)

    from transformers import AutoModelForImageTextToText

    policy = AutoModelForImageTextToText.from_pretrained(
        str(model)
    )  # TRL builds the reference from this path
    for name, param in policy.named_parameters():
        if not TRAIN_VISION and ".visual." in f".{name}":
            param.requires_grad_(False)
    trainer = GRPOTrainer(model=policy, reward_funcs=reward, args=args, train_dataset=dataset,
                          processing_class=processor, callbacks=[Timer()])  # fmt: skip
    trainer.train()
    return times[1:]


def worker(engine: str, steps: int) -> None:
    import torch

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        times = (run_evidra if engine == "evidra" else run_trl)(Path(tmp), steps)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print("RESULT " + json.dumps({"engine": engine, "times": times, "peak_mb": peak_mb}))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=4, help="timed steps per engine (after 1 warm-up)")
    parser.add_argument("--worker", choices=["evidra", "trl"], help=argparse.SUPPRESS)
    parser.add_argument(
        "--train-vision", action="store_true", help="train the vision tower too (both engines)"
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps)
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "BENCH_TRAIN_VISION": "1" if args.train_vision else "0"}  # fmt: skip
    results = {}
    for engine in ("evidra", "trl"):
        proc = subprocess.run([sys.executable, __file__, "--worker", engine, "--steps", str(args.steps)],
                              env=env, capture_output=True, text=True)  # fmt: skip
        line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
        if proc.returncode != 0 or line is None:
            print(f"{engine} failed:\n{proc.stderr[-3000:]}", file=sys.stderr)
            sys.exit(1)
        results[engine] = json.loads(line[len("RESULT ") :])
    vision = "trained" if args.train_vision else "frozen"
    print(f"GRPO step, tiny Qwen2.5-VL, {PROMPTS} prompts x G={GROUP}, <= {NEW_TOKENS} new tokens,")
    print(f"one image per prompt, KL beta {BETA}, fp32, vision tower {vision}, 1 thread,")
    print(f"{args.steps} timed steps after 1 warm-up\n")
    print(f"{'engine':<8} {'median s/step':>14} {'min':>8} {'max':>8} {'peak RSS MB':>12}")
    for engine, r in results.items():
        t = r["times"]
        print(f"{engine:<8} {median(t):>14.3f} {min(t):>8.3f} {max(t):>8.3f} {r['peak_mb']:>12.0f}")
    ratio = median(results["trl"]["times"]) / median(results["evidra"]["times"])
    mem = results["evidra"]["peak_mb"] / results["trl"]["peak_mb"]
    print(f"\nspeed-up of evidra over TRL (median s/step): {ratio:.2f}x; evidra peak memory / TRL: {mem:.2f}")


if __name__ == "__main__":
    main()
