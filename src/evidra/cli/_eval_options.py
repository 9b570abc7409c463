"""The options of ``evidra eval`` that change what a paradigm is shown or how it is scored, as
the papers evaluate: a page budget per question (Lang2Act and EVisRAG show the top-3 retrieved
pages), a curated toolbox in Lang2Act's prompt (``--toolbox``, as ``method.toolbox`` in stage-2
training), and LAT's Step Accuracy with a retriever (``--sa-retriever``)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError

if TYPE_CHECKING:
    from evidra.core.types import Sample
    from evidra.eval.sample_scoring import ExtraScorer
    from evidra.methods.lang2act.paradigm import Tool
    from evidra.paradigms.paradigm import Paradigm


def add_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("what the paradigm sees and how steps are scored")
    g.add_argument(
        "--pages-per-question",
        type=int,
        default=0,
        metavar="K",
        help="show each question its top K pages, ranked by --index when given, else in the "
        "benchmark's own order (Lang2Act, EVisRAG: 3; default: every page)",
    )
    g.add_argument(
        "--toolbox",
        default=None,
        metavar="FILE",
        help="Lang2Act: prompt --paradigm toolchain with this curated toolbox (evidra data toolbox)",
    )
    g.add_argument(
        "--sa-retriever",
        default=None,
        metavar="PATH",
        help="LAT's Step Accuracy (SA column): crop vs step similarity with this ColQwen2/ColPali "
        "checkpoint, hub id or tiny:colqwen2",
    )


@dataclass(frozen=True)
class EvalOptions:
    pages: int = 0  # page budget per question; 0: every page
    toolbox: tuple[Tool, ...] = ()  # the tools of --toolbox; empty: the paradigm's own
    toolbox_name: str = ""
    sa: ExtraScorer | None = None  # gives "sa"

    def variant(self, paradigm: Paradigm) -> str:
        """How this run's prompts differ from the paradigm's defaults (part of its cache key)."""
        parts = [f"top{self.pages}"] if self.pages else []
        if self.toolbox and _lists_tools(paradigm):
            parts.append(f"toolbox={self.toolbox_name}")
        return ",".join(parts)

    def paradigm(self, name: str, explicit: bool) -> Paradigm:
        """The registered paradigm ``name``; with ``--toolbox``, prompting with its tools. A
        paradigm that lists no tools keeps its own prompt under ``--paradigm all`` and is an
        error when named."""
        from evidra.methods.lang2act.paradigm import with_toolbox
        from evidra.paradigms import PARADIGMS

        paradigm = PARADIGMS.get(name)()
        if not self.toolbox or (not explicit and not _lists_tools(paradigm)):
            return paradigm
        try:
            return with_toolbox(paradigm, self.toolbox)
        except InvalidInputError as exc:
            raise InvalidInputError(f"--toolbox: {exc}") from None


def _lists_tools(paradigm: Paradigm) -> bool:
    from evidra.methods.lang2act.paradigm import Toolchain

    return isinstance(paradigm, Toolchain) and paradigm.stage == 2


def parse_options(args: argparse.Namespace) -> EvalOptions:
    """Check the options before any model loads (the SA retriever is loaded by ``load_sa``)."""
    if args.pages_per_question < 0:
        raise InvalidInputError(
            f"--pages-per-question must be >= 1 (0: every page), got {args.pages_per_question}"
        )
    if args.pages_per_question and args.env == "search":
        raise InvalidInputError("--pages-per-question shows pages up front; --env search finds them itself")
    if args.index and args.env != "search" and not args.pages_per_question:
        raise InvalidInputError("--index is for --env search, or ranks pages with --pages-per-question K")
    tools: tuple[Tool, ...] = ()
    if args.toolbox:
        from evidra.methods.lang2act.paradigm import load_toolbox

        tools = load_toolbox(args.toolbox)
    return EvalOptions(args.pages_per_question, tools, Path(args.toolbox).stem if args.toolbox else "")


def with_pages(samples: list[Sample], args: argparse.Namespace) -> list[Sample]:
    """The samples with their top ``--pages-per-question`` pages (ranked by ``--index``)."""
    if not args.pages_per_question:
        return samples
    from evidra.data.pages import top_pages

    searcher = None
    if args.index:
        from evidra.retrieval.lifecycle.index_folder import open_searcher
        from evidra.safeio.keys import KeyPolicy

        searcher = open_searcher(args.index, key_policy=KeyPolicy())  # --index is the user's flag
    return top_pages(samples, args.pages_per_question, searcher)


def load_sa(args: argparse.Namespace, options: EvalOptions) -> EvalOptions:
    """``options`` with the SA scorer of ``--sa-retriever`` (loads the retriever)."""
    if not args.sa_retriever:
        return options
    from dataclasses import replace

    from evidra.methods.lat.evaluation import stepwise_attribution_scorer
    from evidra.methods.lat.similarity import ColQwen2Similarity

    similarity = ColQwen2Similarity.load(args.sa_retriever, device=args.device)
    return replace(options, sa=stepwise_attribution_scorer(similarity))
