"""``evidra index build|add|delete|search|eval``: page retrieval indexes.

evidra index build --store S --out I --encoder colqwen2 --model ckpt/colqwen2
evidra index build --store S --out I --encoder bm25
evidra index add --index I --store S            # pages of S not yet in I
evidra index delete --index I PAGE_ID...
evidra index search --index I -k 5 "When was Orion founded?"
evidra index eval --index I --queries queries.jsonl --qrels qrels.tsv -k 1 5 10
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from evidra.cli._progress import advance


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("index", help="build, update, search and evaluate retrieval indexes")
    sub = p.add_subparsers(dest="index_command", metavar="ACTION", required=True)

    b = sub.add_parser("build", help="index every page of a page store")
    b.add_argument("--store", required=True, help="page store directory (from `evidra ingest`)")
    b.add_argument("--out", required=True, help="new index directory")
    b.add_argument("--encoder", required=True, help="colqwen2 | colpali | dse | visrag | minilm | bm25")
    b.add_argument("--model", default="", help="local encoder checkpoint directory (not for bm25)")
    b.add_argument("--ocr", action="store_true", help="bm25: OCR pages without a text layer (evidra[ocr])")
    _model_options(b)
    b.set_defaults(func=run_build)

    a = sub.add_parser("add", help="add (or with --replace, re-embed) pages of a store")
    a.add_argument("--index", required=True)
    a.add_argument("--store", required=True)
    a.add_argument("--pages", nargs="*", default=None, help="page ids (default: all not yet indexed)")
    a.add_argument("--replace", action="store_true", help="re-embed pages already in the index")
    _model_options(a)
    a.set_defaults(func=run_add)

    d = sub.add_parser("delete", help="remove pages by id")
    d.add_argument("--index", required=True)
    d.add_argument("page_ids", nargs="+")
    d.set_defaults(func=run_delete)

    s = sub.add_parser("search", help="top-k pages for one or more queries")
    s.add_argument("--index", required=True)
    s.add_argument("queries", nargs="+")
    s.add_argument("-k", type=int, default=5)
    s.add_argument("--exclude", nargs="*", default=(), help="page ids to skip")
    s.add_argument("--json", action="store_true", help="one JSON object per query")
    _model_options(s)
    s.set_defaults(func=run_search)

    e = sub.add_parser("eval", help="Recall@k, MRR@k, nDCG@k from queries + qrels files")
    e.add_argument("--index", required=True)
    e.add_argument("--queries", required=True, help="JSONL/TSV of (query id, text)")
    e.add_argument("--qrels", required=True, help="JSONL/TSV of (query-id, corpus-id, score)")
    e.add_argument("-k", type=int, nargs="+", default=[1, 5, 10])
    e.add_argument("--json", action="store_true")
    _model_options(e)
    e.set_defaults(func=run_eval)


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-size", type=int, default=8, help="pages or queries per forward pass")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--dtype", default="float32", help="encoder weights: float32 | bfloat16 | float16")


def _options(args: argparse.Namespace) -> tuple[Any, Any]:
    import torch

    from evidra.retrieval.base import EncoderOptions
    from evidra.retrieval.index import MaxSimOptions

    device = args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    return EncoderOptions(args.batch_size, device, args.dtype), MaxSimOptions(device=device)


def run_build(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from evidra.corpus import PageStore
    from evidra.retrieval.engine import build_index

    pages = PageStore.open(args.store).pages()
    enc_opts, maxsim = _options(args)
    with tqdm(total=len(pages), unit="page", desc="embedding") as bar:
        engine = build_index(
            pages,
            args.out,
            args.encoder,
            args.model,
            options=enc_opts,
            maxsim=maxsim,
            ocr=args.ocr,
            progress=advance(bar),
        )
    print(f"indexed {len(engine.index)} pages with {args.encoder} ({engine.spec.backend}) into {args.out}")
    return 0


def run_add(args: argparse.Namespace) -> int:
    from evidra.corpus import PageStore
    from evidra.errors import InvalidInputError
    from evidra.retrieval.engine import open_index

    enc_opts, maxsim = _options(args)
    engine = open_index(args.index, options=enc_opts, maxsim=maxsim)
    store = PageStore.open(args.store)
    if args.pages:
        unknown = [p for p in args.pages if p not in store]
        if unknown:
            raise InvalidInputError(f"pages not in store {args.store}: {unknown[:5]}")
        pages = [store.get(p) for p in args.pages]
    else:
        have = set(engine.index.page_ids())
        pages = [p for p in store.pages() if args.replace or p.id not in have]
    engine.add(pages, replace=args.replace)
    print(f"added {len(pages)} pages; the index now holds {len(engine.index)}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    from evidra.retrieval.encoders.bm25 import BM25Retriever
    from evidra.retrieval.engine import open_store_only

    index = open_store_only(args.index)
    n = index.delete(args.page_ids)
    if isinstance(index, BM25Retriever):
        index.save(args.index)
    print(f"deleted {n} of {len(args.page_ids)} pages; the index now holds {len(index)}")
    return 0


def run_search(args: argparse.Namespace) -> int:
    from evidra.retrieval.engine import open_index

    enc_opts, maxsim = _options(args)
    engine = open_index(args.index, options=enc_opts, maxsim=maxsim)
    exclude = [set(args.exclude)] * len(args.queries)
    for query, hits in zip(
        args.queries, engine.retriever.search(args.queries, k=args.k, exclude=exclude), strict=True
    ):
        if args.json:
            rows = [{"page_id": h.page_id, "score": h.score, "image_path": h.image_path} for h in hits]
            print(json.dumps({"query": query, "hits": rows}))
            continue
        print(f"query: {query}")
        for rank, h in enumerate(hits, start=1):
            print(f"  {rank:>3}. {h.page_id:<24} {h.score:10.4f}  {h.image_path}")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from evidra.retrieval.engine import open_index
    from evidra.retrieval.evaluation import evaluate, load_qrels, load_queries

    enc_opts, maxsim = _options(args)
    engine = open_index(args.index, options=enc_opts, maxsim=maxsim)
    report = evaluate(engine.retriever, load_queries(args.queries), load_qrels(args.qrels), ks=args.k)
    if args.json:
        print(json.dumps({"n_queries": report.n_queries, "n_skipped": report.n_skipped, **report.metrics}))
        return 0
    print(f"{report.n_queries} judged queries ({report.n_skipped} skipped)")
    for name, value in report.metrics.items():
        print(f"  {name:<10} {value:.4f}")
    return 0
