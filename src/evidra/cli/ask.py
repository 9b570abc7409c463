"""``evidra ask --store S --model PATH "question"``: retrieve pages of a store, answer with evidence.

evidra ask --store S --index I --model M "When was Orion founded?"      # top --k pages of index I
evidra ask --store S --index http://localhost:8000 --model M "..."       # a running serve-index
evidra ask --store S --index I-colqwen2 --index I-bm25 --model M "..."   # hybrid: RRF of both
evidra ask --store S --model M "..."     # the index `evidra index build --store S` registered
evidra ask --store S --model M --page ID --page ID2 "..."                # pages chosen by hand

Without an index (given or registered) and without ``--page``, a store of at most
``--max-pages`` pages is shown whole. ``--paradigm`` picks the output format (default: LAT's
chain of evidence, whose every step cites a page and a box). ``--verify`` checks every evidence
step as LAT's attribution reward does (LAT Eq. 8, S_t >= tau): the step's box is cropped from its
page and scored against the step text, with ColQwen2 (``--retriever PATH``) or, offline, with
the page's text layer inside the box. ``--html FILE`` writes the evidence view (pages with the
cited boxes, images inside the file). ``evidra.RAG`` is the same thing as a Python API.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from evidra.errors import InvalidInputError

if TYPE_CHECKING:
    from evidra.rag import RAG, Answer, Citation


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ask",
        help="answer a question over the pages of a store",
        description="Answer QUESTION with the model at PATH, showing it the chosen pages of store S.",
    )
    p.add_argument("question", help="the question to answer")
    p.add_argument("--store", required=True, metavar="S", help="page store directory")
    model_help = "Qwen-VL model: a directory, a hub id (org/name), tiny:ARCH, or a training run or checkpoint"
    p.add_argument("--model", required=True, metavar="PATH", help=model_help)
    p.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="DIR|URL",
        help="index directory or `evidra serve-index` URL to retrieve pages from (repeat: hybrid RRF); "
        "default: the index registered in the store by `evidra index build --store`",
    )
    p.add_argument("-k", "--k", type=int, default=3, dest="k", help="pages to retrieve (default: 3)")
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
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--max-pixels", type=int, default=None, help="image pixel limit per page")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--paradigm",
        default=None,
        help="output format: coe (cited steps, the default), direct, evidence, toolchain...",
    )
    p.add_argument("--method", default=None, metavar="NAME",
                   help="answer in the format a method's model was trained to write (lat: coe, evisrag: "
                   "evidence, ...; evidra.methods.METHODS)")  # fmt: skip
    p.add_argument("--verify", action="store_true", help="check each evidence step (needs --paradigm coe)")
    p.add_argument(
        "--retriever", default=None, metavar="PATH", help="ColQwen2 checkpoint or hub id for --verify"
    )
    p.add_argument("--tau", type=float, default=0.3, help="similarity threshold for --verify (LAT: 0.3)")
    p.set_defaults(func=run)


def _similarity(retriever: str | None, device: str) -> Any:
    from evidra.rewards.embedding import ColQwen2Similarity, TextOverlapSimilarity

    return ColQwen2Similarity.load(retriever, device=device) if retriever else TextOverlapSimilarity()


def verification_records(verdicts: list[Any]) -> list[dict[str, Any]]:
    """``StepVerdict`` records (``verify_steps``) as JSON, with the keys of ``citation_record``."""
    from evidra.rag import Citation

    return [
        citation_record(
            Citation(v.index, v.text, v.page_id, v.page_index, v.box, v.score, v.supported, v.reason)
        )
        for v in verdicts
    ]


def citation_record(c: Citation) -> dict[str, Any]:
    """A cited step (or the answer's citation, step 0) as JSON: the keys of a verification record."""
    return {
        "step": c.step,
        "text": c.text,
        "page": c.page_id,
        "page_index": c.page_index + 1 if c.page_index is not None else None,
        "box": list(c.box.as_tuple()) if c.box is not None else None,
        "score": c.score,
        "supported": c.supported,
        "reason": c.reason,
    }


def answer_record(answer: Answer) -> dict[str, Any]:
    return {
        "question": answer.question,
        "answer": answer.text,
        "pages": [p.id for p in answer.pages],
        "steps": [citation_record(c) for c in answer.steps],
        "answer_box": citation_record(answer.answer_box) if answer.answer_box else None,
        "retrieved": [
            {"rank": i, "page_id": h.page_id, "score": h.score} for i, h in enumerate(answer.retrieved, 1)
        ],
        "index": list(answer.index),
        "finish_reason": answer.finish_reason,
        "errors": list(answer.errors),
        "output": answer.output,
    }


def _where(record: dict[str, Any]) -> str:
    box = "(" + ", ".join(f"{c:g}" for c in record["box"]) + ")" if record["box"] else "(none)"
    page = f"{record['page']} (image {record['page_index']})" if record["page"] else "(none)"
    return f"page {page} box {box}"


def format_citation(record: dict[str, Any]) -> str:
    """One human line per cited step: number, page, box, then the step text."""
    name = "answer" if record["step"] == 0 else f"step {record['step']}"
    return f"{name}: {_where(record)}: {record['text']}"


def format_verdict(record: dict[str, Any]) -> str:
    """One human line per step: number, page, box, verdict and why, then the step text."""
    verdict = "supported" if record["supported"] else "unsupported"
    return f"step {record['step']}: {verdict} [{record['reason']}] {_where(record)}: {record['text']}"


def _paradigm(args: argparse.Namespace) -> str:
    """``--paradigm``, or the paradigm of ``--method``'s policy, or LAT's chain of evidence."""
    if args.method is None:
        return str(args.paradigm or "coe")
    from evidra.methods import get_method

    paradigm = get_method(args.method).paradigm
    if args.paradigm is not None and args.paradigm != paradigm:
        raise InvalidInputError(f"--method {args.method} answers in paradigm {paradigm!r}; remove --paradigm")
    return paradigm


def _open(args: argparse.Namespace) -> RAG:
    """Check the options, open store and index, then load the model (the heavy part, last)."""
    from evidra.cli._outputs import check_output_file
    from evidra.devices import resolve_device, resolve_dtype
    from evidra.models.generation import SamplingParams
    from evidra.rag import RAG

    args.paradigm = _paradigm(args)
    if args.verify and not args.paradigm.startswith("coe"):
        raise InvalidInputError(
            f"--verify checks Chain-of-Evidence steps; use --paradigm coe, not {args.paradigm!r}"
        )
    if args.page and args.index:
        raise InvalidInputError("pass --page (pages chosen by hand) or --index (retrieved pages), not both")
    if args.html:
        check_output_file(args.html, "--html", "answer.html")  # before minutes of generation
    device = resolve_device(args.device)
    dtype = resolve_dtype(args.dtype, device)
    return RAG.load(
        args.store,
        args.index or None,
        model=args.model,
        paradigm=args.paradigm,
        k=args.k,
        max_pages=args.max_pages,
        params=SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature),
        dtype=dtype,
        device=device,
        max_pixels=args.max_pixels,
    )


def run(args: argparse.Namespace) -> int:
    from evidra.rag import write_html

    with _open(args) as rag:
        similarity = _similarity(args.retriever, args.device) if args.verify else None
        answer = rag.ask(
            args.question, pages=args.page or None, verify=args.verify, similarity=similarity, tau=args.tau
        )
    if args.html:
        write_html(answer, args.html)
    result = answer_record(answer)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
        return 0
    print(f"answer: {answer.text if answer.text is not None else '(no <answer> in the output)'}")
    print(f"pages:  {', '.join(result['pages'])}")
    if answer.errors:
        print(f"format: {'; '.join(answer.errors)}")
    steps = result["steps"]
    if answer.verified:
        supported = sum(r["supported"] for r in steps)
        print(f"evidence: {supported}/{len(steps)} steps supported (tau {args.tau})")
        for record in steps:
            print("  " + format_verdict(record))
    elif steps or result["answer_box"]:
        print(f"cited: {len(steps)} steps")
        for record in steps:
            print("  " + format_citation(record))
    if result["answer_box"]:
        print("  " + format_citation(result["answer_box"]))
    if answer.retrieved:
        print(f"retrieved: top {len(answer.retrieved)} of {', '.join(answer.index)}")
        for i, (hit, page) in enumerate(zip(answer.retrieved, answer.pages, strict=True), 1):
            source = f"{page.source} p.{page.page_number}"
            print(f"  {i}. {hit.page_id:<24} {hit.score:10.4f}  {source}")
    if args.html:
        print(f"html:   {args.html}")
    return 0
