"""``evidra export RUN_OR_CHECKPOINT DIR [--adapter]``: write a trained model as a model directory.

evidra export runs/lat ckpt/lat-7b                # newest checkpoint, LoRA merged in
evidra export runs/lat/checkpoints/step-000200 ckpt/lat-lora --adapter   # the PEFT adapter alone
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "export",
        help="write a training run's model as a loadable Hugging Face model directory",
        description="Rebuild the policy of a run (its newest complete checkpoint) or of one checkpoint, "
        "and write DIR: config.json, safetensors weights with LoRA merged in, the base model's "
        "processor, tokenizer and chat template, the run's config as evidra_config.yaml and a model "
        "card README.md (method and paper, base model, recipe sha256, data, steps, final metrics).",
    )
    p.add_argument("source", metavar="RUN_OR_CHECKPOINT", help="run.output_dir of a run, or a checkpoint")
    p.add_argument("out", metavar="DIR", help="model directory to write (an earlier export is replaced)")
    p.add_argument(
        "--adapter", action="store_true", help="LoRA runs: write the PEFT adapter alone (loads on the base)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.methods import method_facts
    from evidra.rl.runs.export import export_model

    print(export_model(args.source, args.out, adapter_only=args.adapter, method_facts=method_facts))
    return 0
