"""``evidra models tiny KIND DIR`` and ``evidra models resolve REF``: checkpoints to try evidra with.

    evidra models tiny qwen2_5_vl ckpt/tiny-vl      # a tiny random policy, offline, in seconds
    evidra models tiny colqwen2 ckpt/tiny-colqwen2  # a tiny retriever for `index build --model`
    evidra models resolve Qwen/Qwen2.5-VL-3B-Instruct   # fetch into the hub cache, print its folder

A model reference is a directory, a hub id (``org/name[@revision]``) or ``tiny:KIND``; every
command taking a model accepts all three (``evidra.models.references``).
"""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from evidra.models.tiny import TINY_KINDS

    p = subparsers.add_parser(
        "models",
        help="write tiny offline checkpoints, resolve model references",
        description="Tiny random checkpoints to try every command offline, and model references resolved.",
    )
    sub = p.add_subparsers(dest="models_command", metavar="ACTION", required=True)
    t = sub.add_parser(
        "tiny",
        help="write a tiny random checkpoint (the ones the tests use)",
        description="Write a tiny random checkpoint of KIND into DIR: a locally trained tokenizer and "
        "a model of a few hundred thousand parameters, loadable wherever a real one is.",
    )
    t.add_argument("kind", choices=TINY_KINDS, metavar="KIND", help=" | ".join(TINY_KINDS))
    t.add_argument("out", metavar="DIR", help="new checkpoint directory")
    t.add_argument("--seed", type=int, default=0, help="weights and tokenizer seed (default 0)")
    t.set_defaults(func=run_tiny)
    r = sub.add_parser(
        "resolve",
        help="print the directory a model reference names (a hub id is fetched into the hub cache)",
    )
    r.add_argument("ref", metavar="REF", help="a directory, a hub id (org/name[@revision]) or tiny:KIND")
    r.set_defaults(func=run_resolve)


def run_tiny(args: argparse.Namespace) -> int:
    from pathlib import Path

    from evidra.core.errors import InvalidInputError
    from evidra.models.tiny import build_tiny

    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise InvalidInputError(f"{args.out} exists and is not empty; pass a new directory")
    print(f"{args.kind}: {build_tiny(args.kind, out, seed=args.seed)}")
    return 0


def run_resolve(args: argparse.Namespace) -> int:
    from evidra.models.references import resolve_model_ref

    print(resolve_model_ref(args.ref))
    return 0
