"""``evidra demo``: the offline end-to-end demo on embedded defaults (see ``evidra.demo.pipeline``)."""

from __future__ import annotations

import argparse
import logging


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "demo",
        help="run the offline end-to-end demo",
        description="Render a synthetic corpus, build a tiny model, answer its questions citing pages and "
        "boxes, train it (SFT + GRPO), answer again and write a report (JSON + HTML). Needs no network "
        "and no GPU. With --model DIR the same report for a given checkpoint, without training.",
    )
    p.add_argument(
        "--out", default="evidra-demo", help="output folder, new or empty (default: ./evidra-demo)"
    )
    p.add_argument(
        "--overwrite", action="store_true", help="clear the output folder of an earlier demo first"
    )
    p.add_argument(
        "--model",
        default=None,
        help="answer with this checkpoint (model folder or training run); no training",
    )
    p.add_argument(
        "--arch",
        default="qwen2_5_vl",
        choices=["qwen2_vl", "qwen2_5_vl", "qwen3_vl"],
        help="architecture of the tiny model trained when no --model is given",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of documents, model and training")
    p.add_argument("--docs", type=int, default=3, help="number of synthetic documents")
    p.add_argument("--no-train", action="store_true", help="skip the SFT + GRPO learning stage")
    p.add_argument("--sft-steps", type=int, default=200, help="SFT cold-start steps (default: 200)")
    p.add_argument("--rl-steps", type=int, default=6, help="GRPO steps (default: 6)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.demo.pipeline import run_demo

    library = logging.getLogger("evidra")
    level = library.level
    if args.verbose == 0:  # the [demo] lines narrate each stage; the library's INFO lines come with -v
        library.setLevel(logging.WARNING)
    try:
        result = run_demo(
            args.out,
            arch=args.arch,
            model=args.model,
            seed=args.seed,
            n_docs=args.docs,
            train=not args.no_train,
            sft_steps=args.sft_steps,
            rl_steps=args.rl_steps,
            overwrite=args.overwrite,
            progress=lambda msg: print(f"[demo] {msg}", flush=True),
        )
    finally:
        library.setLevel(level)
    print(
        f"[demo] {result.questions} questions over {result.pages} pages in {result.seconds:.1f}s; "
        f"model: {result.model}"
    )
    for s in result.answers:
        print(
            f"[demo] {s.name}: {s.well_formed} of {s.questions} answers well-formed, "
            f"{s.with_boxes} cite a box, {s.correct} correct"
        )
    if result.training:
        held = result.training["held_out"]
        steps = " -> ".join(f"{name} {h['reward']:.3f}" for name, h in held.items())
        print(f"[demo] held-out LAT reward: {steps}")
    for s in result.held_out:
        print(
            f"[demo] held-out pages {s.name}: {s.well_formed} of {s.questions} answers well-formed, "
            f"{s.with_boxes} cite a box, {s.correct} correct"
        )
    print(f"[demo] report: {result.report_html.resolve()}")
    print(f"[demo] data:   {result.report_json.resolve()}")
    return 0
