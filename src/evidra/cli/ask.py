"""``evidra ask --store S --model PATH "question"``: answer a question over pages of a store.

Until retrieval is wired in, the pages are the ones given with ``--page`` (repeatable), or all
pages of a store that has at most ``--max-pages`` of them. ``--paradigm`` picks the output
format (default: direct answer). ``--paradigm coe --verify`` checks every evidence step of the
answer as LAT's attribution reward does (LAT Eq. 8, S_t >= tau): the step's box is cropped from
its page and scored against the step text, with ColQwen2 (``--retriever PATH``) or, offline,
with the page's text layer inside the box.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from evidra.errors import InvalidInputError


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "ask",
        help="answer a question over the pages of a store",
        description="Answer QUESTION with the model at PATH, showing it the chosen pages of store S.",
    )
    p.add_argument("question", help="the question to answer")
    p.add_argument("--store", required=True, metavar="S", help="page store directory")
    model_help = "Qwen-VL model directory, or a training run or checkpoint"
    p.add_argument("--model", required=True, metavar="PATH", help=model_help)
    p.add_argument("--page", action="append", default=[], metavar="ID", help="page id to show (repeatable)")
    p.add_argument(
        "--max-pages", type=int, default=4, help="use every page if the store has at most this many"
    )
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--max-pixels", type=int, default=None, help="image pixel limit per page")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.add_argument(
        "--paradigm", default="direct", help="output format: direct, coe, evidence, toolchain, cot..."
    )
    p.add_argument("--verify", action="store_true", help="check each evidence step (needs --paradigm coe)")
    p.add_argument("--retriever", default=None, metavar="PATH", help="ColQwen2 checkpoint for --verify")
    p.add_argument("--tau", type=float, default=0.3, help="similarity threshold for --verify (LAT: 0.3)")
    p.set_defaults(func=run)


def select_pages(store: Any, wanted: list[str], max_pages: int) -> list[Any]:
    if wanted:
        return [store.get(pid) for pid in wanted]
    pages = store.pages(with_words=False)
    if not pages:
        raise InvalidInputError(f"store {str(store.root)!r} has no pages; run `evidra ingest` first")
    if len(pages) > max_pages:
        raise InvalidInputError(
            f"store has {len(pages)} pages, more than --max-pages {max_pages}; "
            "choose pages with --page ID (see `evidra pages`) or raise --max-pages"
        )
    return pages


def _similarity(retriever: str | None) -> Any:
    from evidra.rewards.embedding import ColQwen2Similarity, TextOverlapSimilarity

    return ColQwen2Similarity.load(retriever) if retriever else TextOverlapSimilarity()


def verification_records(verdicts: list[Any]) -> list[dict[str, Any]]:
    return [
        {
            "step": v.index,
            "text": v.text,
            "page": v.page_id,
            "page_index": v.page_index + 1 if v.page_index is not None else None,
            "box": list(v.box.as_tuple()) if v.box is not None else None,
            "score": v.score,
            "supported": v.supported,
            "reason": v.reason,
        }
        for v in verdicts
    ]


def format_verdict(record: dict[str, Any]) -> str:
    """One human line per step: number, page, box, verdict and why, then the step text."""
    box = "(" + ", ".join(f"{c:g}" for c in record["box"]) + ")" if record["box"] else "(none)"
    page = f"{record['page']} (image {record['page_index']})" if record["page"] else "(none)"
    verdict = "supported" if record["supported"] else "unsupported"
    return f"step {record['step']}: {verdict} [{record['reason']}] page {page} box {box}: {record['text']}"


def run(args: argparse.Namespace) -> int:
    from evidra.corpus import PageStore
    from evidra.models.generation import SamplingParams, generate
    from evidra.models.loading import load_vlm
    from evidra.paradigms import PARADIGMS
    from evidra.rewards.embedding import verify_steps
    from evidra.rl.export import resolve_trained_model
    from evidra.types import Sample

    if args.verify and not args.paradigm.startswith("coe"):
        raise InvalidInputError(
            f"--verify checks Chain-of-Evidence steps; use --paradigm coe, not {args.paradigm!r}"
        )
    paradigm = PARADIGMS.get(args.paradigm)()
    store = PageStore.open(args.store)
    pages = select_pages(store, args.page, args.max_pages)
    if args.verify:  # the offline check reads the text layer
        pages = [store.get(p.id) for p in pages]
    vlm = load_vlm(resolve_trained_model(args.model), max_pixels=args.max_pixels)
    sample = Sample(id="cli", question=args.question, pages=tuple(pages))
    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=args.temperature)
    (gen,) = generate(vlm, [paradigm.build_messages(sample, pages)], params)
    parsed = paradigm.parse(gen.text)
    result = {
        "question": args.question,
        "answer": parsed.answer,
        "pages": [p.id for p in pages],
        "finish_reason": gen.finish_reason,
        "errors": list(parsed.errors),
        "output": gen.text,
    }
    if args.verify:
        verdicts = verify_steps(parsed, pages, _similarity(args.retriever), tau=args.tau)
        result["steps"] = verification_records(verdicts)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(f"answer: {parsed.answer if parsed.answer is not None else '(no <answer> in the output)'}")
        print(f"pages:  {', '.join(result['pages'])}")
        if parsed.errors:
            print(f"format: {'; '.join(parsed.errors)}")
        if args.verify:
            steps = result["steps"]
            supported = sum(r["supported"] for r in steps)
            print(f"evidence: {supported}/{len(steps)} steps supported (tau {args.tau})")
            for record in steps:
                print("  " + format_verdict(record))
    return 0
