"""``evidra ask --store S --model PATH "question"``: retrieve pages of a store, answer with evidence.

evidra ask --store S --index I --model M "When was Orion founded?"      # top --k pages of index I
evidra ask --store S --index http://localhost:8000 --model M "..."       # a running serve-index
evidra ask --store S --index I-colqwen2 --index I-bm25 --model M "..."   # hybrid: both fused
evidra ask --store S --index I1 --index I2 --fusion rrf --rrf-k 60 --model M "..."   # RRF instead
evidra ask --store S --model M "..."     # the index `evidra index build --store S` registered
evidra ask --store S --model M --page ID --page ID2 "..."                # pages chosen by hand
evidra ask --store S --endpoint http://127.0.0.1:8000/v1 --model-name Qwen/Qwen2.5-VL-7B-Instruct "..."

Without an index (given or registered) and without ``--page``, a store of at most
``--max-pages`` pages is shown whole. ``--paradigm`` picks the output format (default: LAT's
chain of evidence, whose every step cites a page and a box). ``--verify`` checks every evidence
step as LAT's attribution reward does (LAT Eq. 8, S_t >= tau): the step's box is cropped from its
page and scored against the step text, with ColQwen2 (``--retriever PATH``) or, offline, with
the page's text layer inside the box. ``--html FILE`` writes the evidence view (pages with the
cited boxes, images inside the file). ``evidra.RAG`` is the same thing as a Python API.

``--endpoint URL --model-name NAME`` asks any OpenAI-compatible VLM server instead of a checkpoint
(the key from ``$OPENAI_API_KEY`` or ``--api-key-env VAR``); it answers in structured JSON
(``--no-structured``: the paradigm's format), its boxes read by its family's convention
(``--box-format`` names another).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from evidra.cli._answer_model import add_endpoint_args, check_endpoint_args, endpoint_options
from evidra.cli._fusion import fusion_from_args
from evidra.cli._retrieval import add_retrieval_args
from evidra.core.errors import InvalidInputError

if TYPE_CHECKING:
    from evidra.methods.lat.similarity import StepSimilarity
    from evidra.rag import RAG


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "ask",
        help="answer a question over the pages of a store",
        description="Answer QUESTION with the model at PATH, showing it the chosen pages of store S.",
    )
    p.add_argument("question", help="the question to answer")
    p.add_argument("--store", required=True, metavar="S", help="page store directory")
    model_help = "Qwen-VL model: a directory, a hub id (org/name), tiny:ARCH, or a training run or checkpoint"
    p.add_argument("--model", default=None, metavar="PATH", help=model_help + " (or --endpoint)")
    add_endpoint_args(p)
    add_retrieval_args(
        p,
        "the index registered in the store by `evidra index build --store`",
        "pages to retrieve",
    )
    p.add_argument("--page", action="append", default=[], metavar="ID", help="page id to show (repeatable)")
    p.add_argument(
        "--max-pages",
        type=int,
        default=4,
        help="without an index, use every page if the store has at most this many",
    )
    p.add_argument("--html", metavar="FILE", help="write a self-contained HTML evidence view")
    p.add_argument("--device", default="auto", help="model device: auto | cpu | cuda")
    p.add_argument(
        "--dtype", default="auto", help="model weights: auto (bfloat16 on a GPU) | float32 | bfloat16"
    )
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens the model may write (default: 1024 for a structured answer, 256 in a paradigm's format)",
    )
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--max-pixels", type=int, default=None, help="image pixel limit per page")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--paradigm",
        default=None,
        help="output format: coe (cited steps, the default), direct, evidence, toolchain...",
    )
    p.add_argument(
        "--method",
        default=None,
        metavar="NAME",
        help="answer in the format a method's model was trained to write (lat: coe, evisrag: "
        "evidence, ...; evidra.methods.METHODS)",
    )
    p.add_argument("--verify", action="store_true", help="check each evidence step (needs --paradigm coe)")
    p.add_argument(
        "--retriever", default=None, metavar="PATH", help="ColQwen2 checkpoint or hub id for --verify"
    )
    p.add_argument(
        "--tau",
        type=float,
        default=None,
        help="similarity threshold for --verify (default: LAT's 0.3 with --retriever, else the "
        "text-layer similarity's calibrated threshold)",
    )
    p.set_defaults(func=run)


def _similarity(retriever: str | None, device: str) -> StepSimilarity:
    from evidra.methods.lat.similarity import ColQwen2Similarity, TextOverlapSimilarity

    return ColQwen2Similarity.load(retriever, device=device) if retriever else TextOverlapSimilarity()


def _paradigm(args: argparse.Namespace) -> str:
    """``--paradigm``, or the paradigm of ``--method``'s policy, or LAT's chain of evidence."""
    if args.method is None:
        return str(args.paradigm or "coe")
    from evidra.methods import get_method

    paradigm = get_method(args.method).paradigm
    if args.paradigm is not None and args.paradigm != paradigm:
        raise InvalidInputError(f"--method {args.method} answers in paradigm {paradigm!r}; remove --paradigm")
    return paradigm


def _check_references(args: argparse.Namespace) -> None:
    """``--model``, ``--encoder`` and ``--retriever`` name checkpoints, checked before the store
    or an index is opened (``evidra.models.references.check_model_ref``)."""
    from evidra.models.references import check_model_ref, written_as_checkpoint

    check_endpoint_args(args)
    if not args.model and not args.endpoint:
        raise InvalidInputError("pass --model PATH (a checkpoint) or --endpoint URL with --model-name NAME")
    if args.model:
        check_model_ref(args.model, "Qwen-VL model", option="--model", need_config=False)  # a run too
    if args.encoder and written_as_checkpoint(args.encoder):
        check_model_ref(args.encoder, "encoder checkpoint", option="--encoder")
    if args.verify and args.retriever:
        check_model_ref(args.retriever, "ColQwen2 retriever", option="--retriever")


def _open(args: argparse.Namespace) -> RAG:
    """Check the options, open store and index, then load the model (the heavy part, last)."""
    from evidra.cli._outputs import check_output_file
    from evidra.core.devices import resolve_device, resolve_dtype
    from evidra.corpus.metadata import parse_where
    from evidra.models.generation import SamplingParams
    from evidra.rag import RAG

    args.paradigm = _paradigm(args)
    parse_where(args.where)  # a malformed filter fails before anything loads
    if args.verify and not args.paradigm.startswith("coe") and not _structured(args):
        raise InvalidInputError(
            f"--verify checks cited steps; use --paradigm coe or --structured, not {args.paradigm!r}"
        )
    if args.page and args.index:
        raise InvalidInputError("pass --page (pages chosen by hand) or --index (retrieved pages), not both")
    fusion = fusion_from_args(args)
    if args.html:
        check_output_file(args.html, "--html", "answer.html")  # before minutes of generation
    _check_references(args)
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    return RAG.load(
        args.store,
        args.index or None,
        model=args.model or None,
        paradigm=args.paradigm,
        k=args.k,
        max_pages=args.max_pages,
        params=SamplingParams(max_new_tokens=_max_new_tokens(args), temperature=args.temperature),
        dtype=dtype,
        device=device,
        max_pixels=args.max_pixels,
        encoder=args.encoder,
        fusion=fusion,
        **endpoint_options(args),
    )


def _max_new_tokens(args: argparse.Namespace) -> int:
    """``--max-new-tokens``, else the default of the answer's mode (``rag.default_max_new_tokens``)."""
    from evidra.rag import default_max_new_tokens

    if args.max_new_tokens is not None:
        return int(args.max_new_tokens)
    return default_max_new_tokens(_structured(args))


def _structured(args: argparse.Namespace) -> bool:
    from evidra.rag import default_structured

    return bool(
        args.structured if args.structured is not None else default_structured(args.model, args.endpoint)
    )


def _out(line: str, keep: str = "") -> None:
    """Print ``line``, whose names and model text may hold terminal controls, written out."""
    from evidra.cli._terminal import shown

    print(shown(line, keep))


def run(args: argparse.Namespace) -> int:
    from evidra.cli._terminal import json_line
    from evidra.rag import UNREADABLE
    from evidra.rag_view import NO_HITS, answer_record, caption, format_citation, format_verdict, write_html

    if args.tau is None:
        from evidra.methods.lat.similarity import LAT_TAU, TEXT_OVERLAP_TAU

        args.tau = LAT_TAU if args.retriever else TEXT_OVERLAP_TAU
    with _open(args) as rag:
        similarity = _similarity(args.retriever, args.device) if args.verify else None
        answer = rag.ask(
            args.question,
            pages=args.page or None,
            verify=args.verify,
            similarity=similarity,
            tau=args.tau,
            where=args.where,
        )
    if args.html:
        write_html(answer, args.html)
    result = answer_record(answer)
    if args.json:
        print(json_line(result))
        return 0
    if answer.no_hits:
        _out(f"answer: ({NO_HITS}: {', '.join(answer.index)})")
    else:
        text = answer.text if answer.parsed else f"({UNREADABLE}; its text is below)"
        _out(f"answer: {text}", keep="\n")
        _out(f"pages:  {'; '.join(p.citation for p in answer.pages)}")
    if answer.errors:
        _out(f"format: {'; '.join(answer.errors)}")
    if not answer.parsed and not answer.no_hits:
        _out(f"output: {answer.output}", keep="\n")
    steps = result["steps"]
    if answer.verified:
        supported = sum(r["supported"] is True for r in steps)
        _out(f"evidence: {supported}/{len(steps)} steps supported (tau {args.tau})")
        for record in steps:
            _out("  " + format_verdict(record))
    elif steps or result["answer_box"]:
        _out(f"cited: {len(steps)} steps")
        for record in steps:
            _out("  " + format_citation(record))
    if result["answer_box"]:
        _out("  " + format_citation(result["answer_box"]))
    if answer.retrieved:
        _out(f"retrieved: top {len(answer.retrieved)} of {', '.join(answer.index)}")
        for i, (hit, page) in enumerate(zip(answer.retrieved, answer.pages, strict=True), 1):
            _out(f"  {caption(page, i, hit)}  ({page.id})")
    if args.html:
        _out(f"html:   {args.html}")
    return 0
