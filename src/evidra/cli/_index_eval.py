"""``evidra index eval``: Recall@k, MRR@k and nDCG@k of one index, or of two or more fused as
``--fusion`` says (hybrid search measured on the user's own queries), against qrels, a benchmark
folder or a benchmark loader's gold pages."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from typing import TYPE_CHECKING

from evidra.cli._fusion import fusion_from_args
from evidra.cli._index_common import _layout, _load_dataset, _options
from evidra.cli._progress import LazyBar

if TYPE_CHECKING:
    from evidra.eval.retrieval import Qrels


def _eval_inputs(args: argparse.Namespace) -> tuple[dict[str, str], Qrels]:
    from evidra.eval.retrieval import check_judged

    queries, qrels, source = _read_eval_inputs(args)
    check_judged(queries, qrels, source)
    return queries, qrels


def _read_eval_inputs(args: argparse.Namespace) -> tuple[dict[str, str], Qrels, str]:
    from evidra.core.errors import InvalidInputError
    from evidra.eval.retrieval import benchmark_queries, load_qrels, load_queries

    given = [
        args.benchmark is not None,
        args.dataset is not None,
        args.queries is not None or args.qrels is not None,
    ]
    if sum(given) != 1:
        raise InvalidInputError(
            "pass one of --benchmark (a benchmark folder), --dataset NAME --data PATH (a loader's "
            "questions and gold pages) or --queries with --qrels"
        )
    if args.benchmark is not None:
        queries, qrels = benchmark_queries(args.benchmark, _layout(args.benchmark, args.benchmark_format))
        return queries, qrels, f"benchmark {args.benchmark}"
    if args.dataset is not None:
        samples = [s for s in _load_dataset(args) if s.gold_pages]  # unanswerable ones have no qrels
        queries = {s.id: s.question for s in samples}
        return queries, {s.id: dict.fromkeys(s.gold_pages, 1.0) for s in samples}, f"--dataset {args.dataset}"
    if args.queries is None or args.qrels is None:
        raise InvalidInputError(
            "--queries and --qrels go together (or pass --benchmark DIR or --dataset NAME)"
        )
    return load_queries(args.queries), load_qrels(args.qrels), f"{args.queries} and {args.qrels}"


def run_eval(args: argparse.Namespace) -> int:
    from evidra.eval.retrieval import evaluate, judged, missing_relevant
    from evidra.retrieval.hybrid import DEFAULT_FUSION, HybridRetriever
    from evidra.retrieval.lifecycle.index_folder import open_index

    fusion = fusion_from_args(args) or DEFAULT_FUSION
    queries, qrels = _eval_inputs(args)
    enc_opts, maxsim = _options(args)
    with ExitStack() as opened:
        engines = [opened.enter_context(open_index(i, options=enc_opts, maxsim=maxsim)) for i in args.index]
        retrievers = tuple(engine.retriever for engine in engines)
        retriever = retrievers[0] if len(retrievers) == 1 else HybridRetriever(retrievers, fusion)
        indexed = [pid for engine in engines for pid in engine.index.page_ids()]
        missing = missing_relevant(queries, qrels, indexed)
        if missing:
            print(
                f"evidra index eval: warning: {len(missing)} relevant corpus id(s) of the qrels are not in "
                f"the index (e.g. {', '.join(sorted(missing)[:3])}); they count as misses",
                file=sys.stderr,
            )
        with LazyBar(total=len(judged(queries, qrels)), unit="query", desc="searching") as progress:
            report = evaluate(retriever, queries, qrels, ks=args.k, progress=progress)
    if args.json:
        print(json.dumps({"n_queries": report.n_queries, "n_skipped": report.n_skipped, **report.metrics}))
        return 0
    print(f"{report.n_queries} judged queries ({report.n_skipped} skipped)")
    for name, value in report.metrics.items():
        print(f"  {name:<10} {value:.4f}")
    return 0
