"""``evidra serve --store S [--model M]``: the web app over a page store (upload, search, ask).

evidra serve --store store/ --model ckpt/Qwen2.5-VL-7B      # http://127.0.0.1:8000
evidra serve --store store/                                 # search and read only, no model
evidra serve --store store/ --endpoint http://127.0.0.1:8001/v1 --model-name Qwen/Qwen2.5-VL-7B-Instruct
evidra serve --store store/ --index idx-colqwen2 --index idx-bm25 --where file=report.pdf --model M

Open the URL: add documents (files or a folder; each is ingested and indexed, a bad file is
listed and skipped), search, ask and watch the answer arrive with every cited box drawn on its
page. Retrieval takes ``evidra ask``'s options (``--index`` repeated for hybrid search or a
``serve-index`` URL, ``--fusion``, ``--where``). The same server speaks the OpenAI
chat-completions API at ``/v1/chat/completions``.
It binds to 127.0.0.1 unless ``--host`` says otherwise; with EVIDRA_APP_API_KEY set every
request needs ``Authorization: Bearer $EVIDRA_APP_API_KEY`` (browsers sign in at /login).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from evidra.cli._answer_model import add_endpoint_args, check_endpoint_args
from evidra.cli._fusion import fusion_from_args
from evidra.cli._retrieval import add_retrieval_args

if TYPE_CHECKING:
    from evidra.app.workspace import Workspace

MIB = 1 << 20


def add_workspace_options(p: argparse.ArgumentParser) -> None:
    """The store, retrieval and model options ``serve`` and ``mcp`` share (retrieval: as ``ask``)."""
    p.add_argument("--store", required=True, metavar="S", help="page store directory (created if missing)")
    add_retrieval_args(
        p,
        "the store's registered index, else S/index-bm25, built on the first upload; with two or more "
        "or a URL, uploads are stored but not indexed",
        "pages an answer reads",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="PATH",
        help="Qwen-VL model that answers (directory, hub id, tiny:ARCH or training run); "
        "without it (and without --endpoint): search only",
    )
    add_endpoint_args(p)
    p.add_argument("--paradigm", default="coe", help="output format (default: coe, every step cites a box)")
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help="tokens an answer may have (default: 1024 for a structured answer, 256 in a paradigm's format)",
    )
    p.add_argument("--device", default="auto", help="model device: auto | cpu | cuda")
    p.add_argument(
        "--dtype", default="auto", help="model weights: auto (bfloat16 on a GPU) | float32 | bfloat16"
    )
    p.add_argument("--max-pixels", type=int, default=None, help="image pixel limit per page")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "serve", help="web app over a page store: add documents, search, ask with evidence"
    )
    add_workspace_options(p)
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on")
    p.add_argument("--max-upload-mb", type=int, default=256, help="largest document accepted (default: 256)")
    p.add_argument(
        "--max-uploads",
        type=int,
        default=2,
        metavar="N",
        help="uploads received, queued or read at once; more are answered 503, retried (default: 2)",
    )
    p.add_argument("--max-connections", type=int, default=512, help="open connections (default: 512)")
    p.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log one line per request (default: on)",
    )
    p.set_defaults(func=run)


def open_workspace(args: argparse.Namespace) -> Workspace:
    """A started ``Workspace`` from the shared options (the model loads last)."""
    from evidra.app.workspace import ModelSpec, SearchSpec, Workspace
    from evidra.paradigms import PARADIGMS

    PARADIGMS.get(args.paradigm)
    check_endpoint_args(args)
    search = SearchSpec(tuple(args.index), fusion_from_args(args), args.encoder, tuple(args.where))
    model = None
    if args.model or args.endpoint:
        model = ModelSpec(
            args.model or "",
            args.paradigm,
            args.max_new_tokens,
            args.device,
            args.dtype,
            args.max_pixels,
            endpoint=args.endpoint,
            model_name=args.model_name,
            api_key_env=args.api_key_env,
            structured=args.structured,
            box_format=args.box_format,
        )
    workspace = Workspace(args.store, None, model, search)
    try:
        workspace.start_sync()
    except BaseException:
        workspace.close()
        raise
    return workspace


def run(args: argparse.Namespace) -> int:
    from evidra.app.http import API_KEY_ENV, ServeOptions
    from evidra.app.server import serve_forever
    from evidra.core.errors import InvalidInputError

    if args.max_uploads < 1:
        raise InvalidInputError(f"--max-uploads must be 1 or more, got {args.max_uploads}")
    options = ServeOptions(
        k=args.k,
        max_k=max(20, args.k),
        max_upload=args.max_upload_mb * MIB,
        max_uploads=args.max_uploads,
        max_connections=args.max_connections,
        api_key=os.environ.get(API_KEY_ENV),
        access_log=args.access_log,
    )
    workspace = open_workspace(args)
    try:
        answerer = args.model or (f"{args.model_name} at {args.endpoint}" if args.endpoint else "")
        what = f"answers with {answerer}" if answerer else "search only (no --model)"
        key = "API key required, " if options.api_key else ""

        def ready(url: str) -> None:
            print(f"evidra serve: {args.store}, {what}, on {url} ({key}Ctrl-C stops)", flush=True)

        serve_forever(workspace, options, args.host, args.port, ready=ready)
    finally:
        workspace.close()
    return 0
