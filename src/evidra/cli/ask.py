"""``evidra ask --store S --model PATH "question"``: answer a question over pages of a store.

Until retrieval is wired in, the pages are the ones given with ``--page`` (repeatable), or all
pages of a store that has at most ``--max-pages`` of them.
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
    p.add_argument("--model", required=True, metavar="PATH", help="local Qwen-VL checkpoint directory")
    p.add_argument("--page", action="append", default=[], metavar="ID", help="page id to show (repeatable)")
    p.add_argument(
        "--max-pages", type=int, default=4, help="use every page if the store has at most this many"
    )
    p.add_argument("--max-new-tokens", type=int, default=256)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--max-pixels", type=int, default=None, help="image pixel limit per page")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
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


def run(args: argparse.Namespace) -> int:
    from evidra.corpus import PageStore
    from evidra.models.generation import SamplingParams, generate
    from evidra.models.loading import load_vlm
    from evidra.paradigms import Direct
    from evidra.types import Sample

    store = PageStore.open(args.store)
    pages = select_pages(store, args.page, args.max_pages)
    vlm = load_vlm(args.model, max_pixels=args.max_pixels)
    paradigm = Direct()
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
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(f"answer: {parsed.answer if parsed.answer is not None else '(no <answer> in the output)'}")
        print(f"pages:  {', '.join(result['pages'])}")
        if parsed.errors:
            print(f"format: {'; '.join(parsed.errors)}")
    return 0
