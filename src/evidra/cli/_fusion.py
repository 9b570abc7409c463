"""Options of hybrid search, shared by ``evidra ask`` and ``evidra index eval``: how the hits of
two or more ``--index`` are fused (``evidra.retrieval.hybrid``)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError

if TYPE_CHECKING:
    from evidra.retrieval.hybrid import Fusion


def add_fusion_args(p: argparse.ArgumentParser) -> None:
    """The options of hybrid search over two or more ``--index`` (``evidra.retrieval.hybrid``)."""
    from evidra.retrieval.hybrid import DEFAULT_DEPTH, DEFAULT_RRF_K, DEFAULT_RULE, FUSIONS

    g = p.add_argument_group("hybrid search (two or more --index)")
    g.add_argument(
        "--fusion",
        choices=FUSIONS.names(),
        default=None,
        help="how the indexes' hits are fused: zscore (sum of each index's z-scores), minmax or rrf "
        f"(reciprocal-rank fusion) (default: {DEFAULT_RULE})",
    )
    g.add_argument(
        "--fusion-depth",
        type=int,
        default=None,
        metavar="N",
        help="hits taken from each index before fusing; at most a serve-index's --max-k "
        f"(default: {DEFAULT_DEPTH})",
    )
    g.add_argument(
        "--fusion-weight",
        type=float,
        action="append",
        default=None,
        metavar="W",
        help="weight of each --index, in their order: give one per index (default: 1 each)",
    )
    g.add_argument(
        "--rrf-k",
        type=int,
        default=None,
        metavar="K",
        help=f"RRF constant k of --fusion rrf: 1 / (k + rank) (default: {DEFAULT_RRF_K})",
    )


def fusion_from_args(args: argparse.Namespace) -> Fusion | None:
    """``Fusion`` of the hybrid options given; None when none is. Options that would change
    nothing (one index, or --rrf-k without --fusion rrf) are refused, not ignored."""
    from evidra.retrieval.hybrid import DEFAULT_FUSION, Fusion

    given = {name: getattr(args, name) for name in ("fusion", "fusion_depth", "fusion_weight", "rrf_k")}
    if all(value is None for value in given.values()):
        return None
    shown = ", ".join("--" + name.replace("_", "-") for name, value in given.items() if value is not None)
    if len(args.index) < 2:
        got = len(args.index)
        raise InvalidInputError(
            f"{shown} apply to two or more --index (got {got}); pass another --index or drop {shown}"
        )
    rule = args.fusion or DEFAULT_FUSION.rule
    if args.rrf_k is not None and rule != "rrf":
        raise InvalidInputError(
            f"--rrf-k is the constant of --fusion rrf; add --fusion rrf or drop --rrf-k "
            f"(--fusion {rule} does not use it)"
        )
    if args.fusion_weight is not None and len(args.fusion_weight) != len(args.index):
        raise InvalidInputError(
            f"got {len(args.fusion_weight)} --fusion-weight for {len(args.index)} --index; give one per index"
        )
    return Fusion(
        rule,
        DEFAULT_FUSION.depth if args.fusion_depth is None else args.fusion_depth,
        None if args.fusion_weight is None else tuple(args.fusion_weight),
        DEFAULT_FUSION.rrf_k if args.rrf_k is None else args.rrf_k,
    )
