"""What ``evidra index``'s subcommands share: store options from the flags, a benchmark folder's
layout, a loader's samples (``index``, ``_search`` and ``_index_eval`` import it; none of them
imports another's module at import time)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from evidra.core.types import Sample
    from evidra.eval.retrieval import Layout
    from evidra.retrieval.index import MaxSimOptions
    from evidra.retrieval.interfaces import EncoderOptions


def _options(args: argparse.Namespace) -> tuple[EncoderOptions, MaxSimOptions]:
    from evidra.core.devices import resolve_device
    from evidra.retrieval.index import MaxSimOptions
    from evidra.retrieval.interfaces import EncoderOptions

    device = resolve_device(args.device)
    maxsim = MaxSimOptions(
        device=device,
        compute_dtype=args.compute_dtype,
        storage_dtype=args.storage_dtype,
        kernel=args.maxsim_kernel,
    )
    return EncoderOptions(args.batch_size, device, args.dtype), maxsim


def _layout(path: str, fmt: str) -> Layout:
    from evidra.eval.retrieval import detect_layout

    return detect_layout(path) if fmt == "auto" else cast("Layout", fmt)  # argparse checked the choice


def _load_dataset(args: argparse.Namespace) -> list[Sample]:
    from evidra.core.errors import InvalidInputError
    from evidra.data.loaders import load, parse_options

    if not args.data:
        raise InvalidInputError(f"--dataset {args.dataset} needs --data: the benchmark's files")
    bad = [o for o in args.option if "=" not in o]
    if bad:
        raise InvalidInputError(f"--option takes KEY=VALUE, got {bad[0]!r}")
    return load(args.dataset, args.data, **parse_options(dict(o.split("=", 1) for o in args.option)))
