"""Options of retrieval, shared by ``evidra ask``, ``evidra serve`` and ``evidra mcp``: the indexes
(directories or ``serve-index`` URLs; two or more fused: ``evidra.cli._fusion``), the encoder of a
moved visual index, the pages per answer and the metadata filter. Every command that retrieves
reads them into ``evidra.retrieval.lifecycle.attach.StoreRetriever`` the same way."""

from __future__ import annotations

import argparse

from evidra.cli._fusion import add_fusion_args

WHERE_HELP = (
    "only pages whose document matches: file=NAME, doc=ID, page=N, title=TEXT or a --meta key of ingest "
    "(repeatable: one key's values are alternatives, different keys must all match)"
)


def add_retrieval_args(p: argparse.ArgumentParser, default_index: str, k_help: str) -> None:
    """``--index`` (repeatable), the hybrid options, ``--encoder``, ``-k`` and ``--where``;
    ``default_index`` says which index is used without ``--index``."""
    p.add_argument(
        "--index",
        action="append",
        default=[],
        metavar="DIR|URL",
        help="index directory or `evidra serve-index` URL to retrieve pages from (repeat: hybrid search, "
        f"fused by --fusion); default: {default_index}",
    )
    add_fusion_args(p)
    p.add_argument(
        "--encoder",
        default="",
        metavar="DIR",
        help="encoder checkpoint of a visual --index, if moved since `index build` "
        "(default: the one it recorded)",
    )
    p.add_argument("-k", "--k", type=int, default=3, dest="k", help=f"{k_help} (default: 3)")
    p.add_argument("--where", action="append", default=[], metavar="KEY=VALUE", help=WHERE_HELP)
