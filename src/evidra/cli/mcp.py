"""``evidra mcp --store S [--model M]``: the store's search, pages and answers as MCP tools (stdio).

evidra mcp --store store/ --model ckpt/Qwen2.5-VL-7B
evidra mcp --store store/ --endpoint http://127.0.0.1:8000/v1 --model-name Qwen/Qwen2.5-VL-7B-Instruct

An agent host starts this command and talks MCP over its stdin/stdout; tools: ``search``,
``page``, ``ask`` (see ``evidra.app.mcp_server``). Logs go to stderr.
"""

from __future__ import annotations

import argparse

from evidra.cli._answer_model import check_endpoint_args
from evidra.cli.serve import add_workspace_options, open_workspace


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("mcp", help="MCP server (stdio) with search, page and ask tools over a store")
    add_workspace_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import importlib.util

    from evidra.app.http import ServeOptions
    from evidra.app.mcp_server import build_mcp
    from evidra.core.errors import MissingDependencyError

    check_endpoint_args(args)  # the cheap checks first
    if importlib.util.find_spec("mcp") is None:  # checked before the model loads
        raise MissingDependencyError("evidra mcp needs the MCP SDK: pip install 'evidra[app]' (or mcp)")
    workspace = open_workspace(args)
    try:
        build_mcp(workspace, ServeOptions(k=args.k, max_k=max(20, args.k))).run("stdio")
    finally:
        workspace.close()
    return 0
