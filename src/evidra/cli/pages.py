"""``evidra pages S``: list the pages of a store."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "pages", help="list the pages of a page store", description="List the pages of S."
    )
    p.add_argument("store", metavar="S", help="page store directory")
    p.add_argument("--json", action="store_true", help="one JSON object per page")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.cli._terminal import json_line, shown
    from evidra.corpus import PageStore

    store = PageStore.open(args.store)
    pages = store.pages()
    if args.json:
        for page in pages:
            record = {
                "id": page.id,
                "source": page.source,
                "page_number": page.page_number,
                "width": page.width,
                "height": page.height,
                "words": len(page.words),
                "image_path": page.image_path,
            }
            print(json_line(record, ascii_only=True))  # as before: every non-ASCII name escaped
        return 0
    print(f"{'page id':<24} {'size':>11} {'words':>6}  source")
    for page in pages:
        size = f"{page.width}x{page.height}"
        source = f"{shown(page.source)} p.{page.page_number}"
        print(f"{shown(page.id):<24} {size:>11} {len(page.words):>6}  {source}")
    print(f"{len(pages)} pages")
    return 0
