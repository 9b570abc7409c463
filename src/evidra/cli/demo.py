"""``evidra demo``: the offline end-to-end demo on embedded defaults (see ``evidra.demo``)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the offline end-to-end demo",
        description="Render a synthetic corpus, ingest it, build a tiny model, answer questions and "
        "write a report (JSON + HTML). Needs no network and no GPU.",
    )
    p.add_argument("--out", default="evidra-demo", help="output folder (default: ./evidra-demo)")
    p.add_argument("--arch", default="qwen2_5_vl", choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--docs", type=int, default=3, help="number of synthetic documents")
    p.add_argument("--no-train", action="store_true", help="skip the SFT + GRPO learning stage")
    p.add_argument("--sft-steps", type=int, default=120, help="SFT cold-start steps (default: 120)")
    p.add_argument("--rl-steps", type=int, default=15, help="GRPO steps (default: 15)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.demo import run_demo

    result = run_demo(
        args.out,
        arch=args.arch,
        seed=args.seed,
        n_docs=args.docs,
        train=not args.no_train,
        sft_steps=args.sft_steps,
        rl_steps=args.rl_steps,
        progress=lambda msg: print(f"[demo] {msg}", flush=True),
    )
    print(
        f"[demo] {result.questions} questions over {result.pages} pages in {result.seconds:.1f}s: "
        f"{result.parsed} well-formed answers, {result.correct} correct (the tiny model is untrained)"
    )
    if result.training:
        held = result.training["held_out"]
        steps = " -> ".join(f"{name} {h['reward']:.3f}" for name, h in held.items())
        print(f"[demo] held-out LAT reward: {steps}")
    print(f"[demo] report: {result.report_html.resolve()}")
    print(f"[demo] data:   {result.report_json.resolve()}")
    return 0
