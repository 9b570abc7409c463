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
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from statistics import median

from grpo_common import (
    EngineResult,
    Settings,
    print_result,
    run_evidra,
    run_trl,
    run_worker,
    settings_from_json,
    settings_to_json,
    write_images,
)

SETTINGS = Settings()  # 8 prompts x G=4, 32 new tokens, 224x224 images, beta 0.04, fp32, CPU


def worker(engine: str, steps: int, s: Settings) -> None:
    import torch

    from evidra.models.tiny import build_tiny

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        model = build_tiny("qwen2_5_vl", Path(tmp) / "model")
        images = write_images(Path(tmp), s.prompts, s.image_size)
        result: EngineResult = (run_evidra if engine == "evidra" else run_trl)(
            model, images, Path(tmp), steps, s
        )
    print_result(result)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=4, help="timed steps per engine (after 1 warm-up)")
    parser.add_argument("--worker", choices=["evidra", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--settings", help=argparse.SUPPRESS)
    parser.add_argument(
        "--train-vision", action="store_true", help="train the vision tower too (both engines)"
    )
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, settings_from_json(args.settings))
        return
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    s = replace(SETTINGS, train_vision=args.train_vision)
    results = {}
    for engine in ("evidra", "trl"):
        argv = [__file__, "--worker", engine, "--steps", str(args.steps), "--settings", settings_to_json(s)]
        out, err = run_worker(argv, env)
        if out is None:
            print(f"{engine} failed:\n{err}", file=sys.stderr)
            sys.exit(1)
        results[engine] = out
    vision = "trained" if args.train_vision else "frozen"
    print(f"GRPO step, tiny Qwen2.5-VL, {s.prompts} prompts x G={s.group}, <= {s.new_tokens} new tokens,")
    print(f"one image per prompt, KL beta {s.beta}, fp32, vision tower {vision}, 1 thread,")
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
