"""``evidra serve-index --index I [--encoder CKPT]``: serve an index over HTTP with batching.

evidra serve-index --index idx/ --port 8765 --max-batch 32 --max-wait-ms 5
curl -s localhost:8765/search -d '{"queries": ["When was Orion founded?"], "k": 5}'

With EVIDRA_INDEX_API_KEY set, /search needs ``Authorization: Bearer $EVIDRA_INDEX_API_KEY``
(evidra's clients send it from the same variable). Each request is logged on one line (method,
path, status, queries, milliseconds) unless ``--no-access-log``; Ctrl-C or SIGTERM stops it,
letting requests in flight finish for up to 5 s.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from evidra.cli.index import scoring_options

if TYPE_CHECKING:
    from evidra.corpus.metadata import PageMeta


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("serve-index", help="serve a retrieval index over HTTP (batched search)")
    p.add_argument("--index", required=True, help="index directory from `evidra index build`")
    p.add_argument(
        "--encoder", default=None, help="encoder checkpoint or hub id (default: the one it was built with)"
    )
    p.add_argument(
        "--store",
        help="the page store the index covers: hits carry file, page, title and metadata, and requests "
        'may filter with "where" (default: the store `index build --store` recorded)',
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8765, help="TCP port to listen on")
    p.add_argument("--max-batch", type=int, default=32, help="queries per batched search")
    p.add_argument(
        "--max-wait-ms", type=float, default=5.0, help="how long a request waits for others to batch with"
    )
    p.add_argument("--max-queries", type=int, default=256, help="queries per request (default: 256)")
    p.add_argument("--max-query-chars", type=int, default=4096, help="characters per query (default: 4096)")
    p.add_argument(
        "--max-connections",
        type=int,
        default=512,
        help="open connections; at the cap the longest idle one is closed (default: 512)",
    )
    p.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log one line per request: method, path, status, queries, ms (default: on)",
    )
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--dtype", default="float32", help="encoder weights: float32 | bfloat16 | float16")
    p.add_argument("--batch-size", type=int, default=32, help="queries per encoder forward pass")
    scoring_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.cli._index_common import _options
    from evidra.retrieval.lifecycle.index_folder import open_index
    from evidra.retrieval.service.server import API_KEY_ENV, SearchService, ServiceOptions

    options = ServiceOptions(
        max_batch=args.max_batch,
        max_wait_ms=args.max_wait_ms,
        max_queries=args.max_queries,
        max_query_chars=args.max_query_chars,
        api_key=os.environ.get(API_KEY_ENV),
        access_log=args.access_log,
        max_connections=args.max_connections,
    )
    enc_opts, maxsim = _options(args)
    with open_index(args.index, encoder_path=args.encoder, options=enc_opts, maxsim=maxsim) as engine:
        service = SearchService(engine.retriever, options, n_pages=len(engine.index), pages=_pages(args))
        key = "API key required, " if options.api_key else ""

        def ready(url: str) -> None:
            print(
                f"serving {len(engine.index)} pages of {args.index} on {url} ({key}Ctrl-C stops)", flush=True
            )

        service.serve_forever(args.host, args.port, ready=ready)
    return 0


def _pages(args: argparse.Namespace) -> dict[str, PageMeta] | None:
    """The metadata of the index's pages, from --store or the store the index recorded (None without)."""
    from pathlib import Path

    from evidra.corpus import PageStore
    from evidra.retrieval.lifecycle.manifest import read_spec

    store = args.store or read_spec(args.index).store
    if not store or not (args.store or Path(store).is_dir()):
        return None
    with PageStore.open(store) as opened:
        return opened.page_meta()
