"""``evidra index search``: hits named by file and page, with their document's metadata, filtered
by ``--where`` (the index's page store: ``--store``, or the one ``index build --store`` recorded)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.cli._index_common import _options
from evidra.cli._terminal import json_line, shown

if TYPE_CHECKING:
    from evidra.corpus.metadata import PageMeta
    from evidra.retrieval.interfaces import Hit


def _search_metadata(args: argparse.Namespace) -> tuple[dict[str, PageMeta], set[str]]:
    """Each page's ``PageMeta`` from the index's store (``{}`` without one), and the page ids that
    ``--where`` rules out."""
    from evidra.core.errors import InvalidInputError
    from evidra.corpus import PageStore
    from evidra.corpus.metadata import parse_where
    from evidra.retrieval.lifecycle.manifest import read_spec

    where = parse_where(args.where)
    store = args.store or read_spec(args.index).store
    if not store or not (args.store or Path(store).is_dir()):
        if where:
            raise InvalidInputError(
                f"--where needs the page store of index {args.index}; pass --store S (the store it "
                "was built over)"
            )
        return {}, set()
    with PageStore.open(store) as opened:
        metas = opened.page_meta()
    excluded = {pid for pid, m in metas.items() if not where.matches(m)} if where else set()
    if where and len(excluded) == len(metas):
        raise InvalidInputError(f"no page of store {store} matches {where}; see `evidra pages {store}`")
    return metas, excluded


def run_search(args: argparse.Namespace) -> int:
    from evidra.retrieval.lifecycle.index_folder import open_index

    enc_opts, maxsim = _options(args)  # option errors (--device cuda without CUDA) first
    metas, ruled_out = _search_metadata(args)
    exclude = [set(args.exclude) | ruled_out] * len(args.queries)
    with open_index(args.index, options=enc_opts, maxsim=maxsim, encoder_path=args.encoder) as engine:
        results = engine.retriever.search(args.queries, k=args.k, exclude=exclude)
    for query, hits in zip(args.queries, results, strict=True):
        if args.json:
            rows = [
                {
                    "page_id": h.page_id,
                    "score": h.score,
                    "image_path": h.image_path,
                    **(metas[h.page_id].record() if h.page_id in metas else {}),
                }
                for h in hits
            ]
            print(json_line({"query": query, "hits": rows}))
            continue
        print(f"query: {shown(query)}")
        if not hits:
            print("  no relevant page: no page of the index matches the query")
        for rank, h in enumerate(hits, start=1):
            print(f"  {rank:>3}. {h.score:10.4f}  {_hit_line(h, metas.get(h.page_id))}")
    return 0


def _hit_line(hit: Hit, meta: PageMeta | None) -> str:
    """Where a hit is: file and page, title and page id (with its store), else page id and image;
    every stored name shown with its control characters written out (``_terminal``)."""
    if meta is None:
        return f"{shown(hit.page_id):<24}  {shown(hit.image_path)}"
    return f"{shown(meta.citation):<28} {shown(meta.title[:40]):<40}  {shown(hit.page_id)}"
