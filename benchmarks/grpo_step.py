"""GRPO step on equal work: evidra vs TRL's GRPOTrainer on the same tiny Qwen2.5-VL, in one run.

Setting (both engines): 8 prompts x G=4 completions per step, exactly 32 new tokens each
(end-of-turn suppressed until then: evidra's ``rollout.min_new_tokens``, transformers'
``min_new_tokens``), one 224x224 image per prompt, KL to a frozen reference (beta 0.04, k3 in
the loss), token-mean loss, clip 0.2, full fine-tuning in fp32, AdamW, one thread.

Each engine runs in its own process (peak memory is its own), and the two take turns step by
step (one warm-up step each, then rounds in alternating order), so a busy spell on a shared
machine slows both rather than one. The table gives each engine's medians over the timed steps:
completion tokens, generation and update seconds, step seconds, tokens per second; the speed-up
is TRL's median step time over evidra's (the median of the per-round ratios is printed too).

    OMP_NUM_THREADS=1 python benchmarks/grpo_step.py --steps 8

Needs ``pip install trl`` for the peer (``pip install 'evidra[bench]'``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from statistics import median
from typing import IO, Any

from grpo_common import (
    Settings,
    StepFigures,
    print_result,
    run_evidra,
    run_trl,
    settings_from_json,
    settings_to_json,
    write_images,
)

ENGINES = ("evidra", "trl")


class StdioPacer:
    """The worker's side: ``WAIT`` then block on a line of stdin; ``STEP {json}`` when it ends."""

    def wait(self) -> None:
        print("WAIT", flush=True)
        if not sys.stdin.readline():
            sys.exit("grpo_step worker: the coordinator went away")

    def done(self, figures: StepFigures) -> None:
        print("STEP " + json.dumps(figures.__dict__), flush=True)


def worker(engine: str, steps: int, s: Settings) -> None:
    import torch

    from evidra.models.tiny import build_tiny

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny("qwen2_5_vl", Path(tmp) / "model")
        images = write_images(Path(tmp), s.prompts, s.image_size)
        run = run_evidra if engine == "evidra" else run_trl
        result = run(model, images, Path(tmp), steps, s, StdioPacer())
    print_result(result)


class Worker:
    """The coordinator's side of one engine's process."""

    def __init__(self, engine: str, argv: list[str], env: dict[str, str], log: IO[str]) -> None:
        self.engine, self.log = engine, log
        self.proc = subprocess.Popen(
            [sys.executable, *argv],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
        self.steps: list[StepFigures] = []
        self.result: dict[str, Any] = {}
        self.expect("WAIT")

    def expect(self, *tags: str) -> str:
        """The first stdout line starting with one of ``tags`` (other output is skipped)."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(tags):
                return line.rstrip("\n")
        self.proc.wait()
        self.log.flush()
        self.log.seek(0)
        sys.exit(f"{self.engine} failed (exit {self.proc.returncode}):\n{self.log.read()[-3000:]}")

    def step(self) -> StepFigures:
        """Run one step; returns once the engine is idle again (waiting, or finished)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        figures = StepFigures(**json.loads(self.expect("STEP")[len("STEP ") :]))
        self.steps.append(figures)
        last = self.expect("WAIT", "RESULT ")
        if last.startswith("RESULT "):
            self.result = json.loads(last[len("RESULT ") :])
            self.proc.wait()
        return figures


def run(steps: int, s: Settings) -> dict[str, Worker]:
    """Both engines, one warm-up step each, then ``steps`` rounds in alternating order."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    workers = {}
    with ExitStack() as logs:  # each worker's stderr, shown if it fails
        for engine in ENGINES:  # one after the other: neither's set-up overlaps the other's steps
            argv = [__file__, "--worker", engine, "--steps", str(steps), "--settings", settings_to_json(s)]
            workers[engine] = Worker(engine, argv, env, logs.enter_context(tempfile.TemporaryFile("w+")))
        for engine in ENGINES:
            workers[engine].step()
            workers[engine].steps.clear()  # warm-up
        for i in range(steps):
            for engine in ENGINES if i % 2 == 0 else ENGINES[::-1]:
                workers[engine].step()
    return workers


def cpu_summary() -> str:
    from evidra.retrieval.kernels.compute_dtype import cpu_features

    return cpu_features().summary()


def report(workers: dict[str, Worker], s: Settings, steps: int) -> None:
    cap = s.prompts * s.group * s.new_tokens
    length = f"exactly {s.new_tokens}" if s.fixed_length else f"<= {s.new_tokens}"
    print(f"GRPO step, tiny Qwen2.5-VL, {s.prompts} prompts x G={s.group}, {length} new tokens each,")
    vision = "trained" if s.train_vision else "frozen"
    image = f"one {s.image_size}px image per prompt"
    print(f"{image}, KL beta {s.beta}, {s.dtype}, vision tower {vision}, one thread;")
    print(f"{steps} timed steps per engine after 1 warm-up, engines alternating step by step")
    print(f"cpu: {cpu_summary()}\n")
    table(workers)
    ev, trl = workers["evidra"], workers["trl"]
    equal = all(f.tokens == cap for w in workers.values() for f in w.steps)
    rounds = [t.step_s / e.step_s for e, t in zip(ev.steps, trl.steps, strict=True)]
    speedup = median(f.step_s for f in trl.steps) / median(f.step_s for f in ev.steps)
    cpu = median(f.cpu_s for f in trl.steps) / median(f.cpu_s for f in ev.steps)
    memory = ev.result["peak_mb"] / trl.result["peak_mb"]
    print(f"\nwork: {'equal' if equal else 'NOT equal'} ({cap} completion tokens per step expected)")
    print(f"TRL / evidra: median step time {speedup:.2f}x, median CPU time {cpu:.2f}x,")
    spread = f"range {min(rounds):.2f}-{max(rounds):.2f}"
    print(f"median of the per-round step time ratios {median(rounds):.2f}x ({spread})")
    print(f"RESULT speedup_vs_trl={speedup:.2f} memory_vs_trl={memory:.2f}")


HEAD = (
    "engine",
    "tokens/step",
    "generation s",
    "update s",
    "step s",
    "min-max s",
    "CPU s",
    "tokens/s",
    "peak RSS MB",
)


def table(workers: dict[str, Worker]) -> None:
    """Each engine's medians over its timed steps (update: step less generation; CPU: process time)."""
    print("| " + " | ".join(HEAD) + " |")
    print("|" + "|".join("---" for _ in HEAD) + "|")
    for engine, w in workers.items():
        step, gen = median(f.step_s for f in w.steps), median(f.gen_s for f in w.steps)
        tokens, cpu = median(f.tokens for f in w.steps), median(f.cpu_s for f in w.steps)
        low, high = min(f.step_s for f in w.steps), max(f.step_s for f in w.steps)
        times = (f"{gen:.3f}", f"{step - gen:.3f}", f"{step:.3f}", f"{low:.3f}-{high:.3f}", f"{cpu:.3f}")
        cells = (engine, f"{tokens:.0f}", *times, f"{tokens / step:.0f}", f"{w.result['peak_mb']:.0f}")
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=8, help="timed steps per engine (after 1 warm-up)")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--group", type=int, default=4, help="completions per prompt (G)")
    parser.add_argument("--new-tokens", type=int, default=32, help="new tokens per completion")
    parser.add_argument("--image-size", type=int, default=224, help="square page image, pixels")
    parser.add_argument(
        "--dtype",
        choices=["float32", "bfloat16"],
        default="float32",
        help="compute dtype of both engines (bfloat16 keeps fp32 master weights)",
    )
    parser.add_argument(
        "--train-vision", action="store_true", help="train the vision tower too (both engines)"
    )
    parser.add_argument(
        "--sampled-lengths",
        action="store_true",
        help="let completions end at end-of-turn: each engine's own sampled lengths (unequal work)",
    )
    parser.add_argument("--worker", choices=ENGINES, help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, settings_from_json(args.settings))
        return
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    s = replace(
        Settings(fixed_length=not args.sampled_lengths, dtype=args.dtype, train_vision=args.train_vision),
        prompts=args.prompts,
        group=args.group,
        new_tokens=args.new_tokens,
        image_size=args.image_size,
        micro_batch=args.prompts * args.group,
    )
    report(run(args.steps, s), s, args.steps)


if __name__ == "__main__":
    main()
