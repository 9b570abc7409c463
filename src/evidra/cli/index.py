"""``evidra index build|add|delete|search|eval``: page retrieval indexes.

evidra index build --store S --out I --encoder colqwen2 --model ckpt/colqwen2
evidra index build --store S --out I --encoder bm25     # registered in S: `evidra ask --store S` uses it
evidra index build --store S --out I --encoder colqwen2 --model M --backend qdrant --qdrant-url http://localhost:6333
evidra index build --corpus data/esg_reports_v2/ --out I --encoder colqwen2 --model ckpt/colqwen2
evidra index build --dataset slidevqa --data data/slidevqa/train.jsonl --out I --encoder colqwen2 --model M
evidra index add --index I --store S            # pages of S not yet in I
evidra index delete --index I PAGE_ID...
evidra index search --index I -k 5 "When was Orion founded?"
evidra index eval --index I --queries queries.jsonl --qrels qrels.tsv -k 1 5 10
evidra index eval --index I --benchmark data/esg_reports_v2/ -k 1 5 10
evidra index eval --index I --dataset slidevqa --data data/slidevqa/test.jsonl   # gold pages as qrels
evidra index eval --index I1 --index I2 --queries q.jsonl --qrels r.tsv --fusion rrf   # a hybrid's figures

``--corpus`` indexes a retrieval benchmark folder instead of a page store: the BEIR layout of
ViDoRe v2 and VisRAG (``corpus``/``queries``/``qrels``), or ViDoRe v1's QA rows; page ids are the
benchmark's corpus ids (image file names for v1), so ``eval --benchmark`` scores the same folder's
queries and qrels against them. Inline images are written to ``<out>/images`` (``--image-dir``).
``--dataset`` indexes the pages of a training/evaluation benchmark loader with the loader's page
ids, so ``train rl`` with ``data.source`` and ``method.index`` finds its gold pages in it.

``--backend qdrant`` keeps the vectors in Qdrant instead of the directory's exact store: a
collection on a server or cluster (``--qdrant-url``; the API key comes from ``$QDRANT_API_KEY``,
never from the command line or the manifest) or, without a URL, Qdrant Edge, Qdrant's engine
embedded in the process, in ``<out>/qdrant``. Every other command then works on the directory as
usual.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.cli._fusion import add_fusion_args
from evidra.cli._index_common import _layout, _load_dataset, _options
from evidra.cli._progress import LazyBar

if TYPE_CHECKING:
    from evidra.core.types import Page
    from evidra.retrieval.lifecycle.index_folder import Engine
    from evidra.retrieval.lifecycle.qdrant_build import QdrantSpec

_FORMATS = ("auto", "beir", "vidore_v1")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("index", help="build, update, search and evaluate retrieval indexes")
    sub = p.add_subparsers(dest="index_command", metavar="ACTION", required=True)

    b = sub.add_parser("build", help="index every page of a page store or benchmark corpus")
    b.add_argument("--store", help="page store directory (from `evidra ingest`)")
    b.add_argument("--corpus", help="retrieval benchmark folder instead (ViDoRe v1/v2, VisRAG)")
    b.add_argument("--corpus-format", choices=_FORMATS, default="auto", help="--corpus layout")
    b.add_argument("--image-dir", help="--corpus: where inline images go (default <out>/images)")
    b.add_argument(
        "--dataset", help="or the pages of a benchmark loader (evidra.data.loaders), e.g. slidevqa"
    )
    b.add_argument("--data", help="--dataset: the benchmark's files")
    b.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="--dataset: loader option"
    )
    b.add_argument("--out", required=True, help="new index directory")
    b.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an index already at --out, once the new one is built",
    )
    b.add_argument("--encoder", required=True, help="colqwen2 | colpali | dse | visrag | minilm | bm25")
    b.add_argument("--model", default="", help="encoder checkpoint, hub id or tiny:ARCH (not bm25)")
    b.add_argument("--ocr", action="store_true", help="bm25: OCR pages without a text layer (evidra[ocr])")
    b.add_argument(
        "--language",
        default="en",
        help="bm25: the language whose stop words are dropped (and stemmer used with --stem): "
        "en, de, fr, es, it, pt, nl, da, sv, no, ru, tr, or none for plain word tokens (default: en)",
    )
    b.add_argument("--stem", action="store_true", help="bm25: stem words too (Snowball, PyStemmer)")
    b.add_argument(
        "--backend", choices=("auto", "qdrant"), default="auto", help="auto: the exact store for the encoder"
    )
    b.add_argument(
        "--qdrant-url",
        help="qdrant: server or cluster URL (API key from $QDRANT_API_KEY); without it, Qdrant Edge "
        "embedded in <out>/qdrant",
    )
    b.add_argument("--collection", default="evidra_pages", help="qdrant server: collection name")
    b.add_argument(
        "--prefetch",
        type=int,
        default=200,
        help="qdrant: pooled candidates re-ranked exactly (0: exhaustive)",
    )
    b.add_argument("--grpc", action="store_true", help="qdrant: talk to the server over gRPC")
    b.add_argument(
        "--pooling",
        choices=("mean", "clustered"),
        default="mean",
        help="qdrant: prefetch vectors from consecutive runs (mean) or clusters of similar patches",
    )
    _model_options(b)
    b.set_defaults(func=run_build)

    a = sub.add_parser("add", help="add (or with --replace, re-embed) pages of a store")
    a.add_argument("--index", required=True, help="index directory (from `evidra index build`)")
    a.add_argument("--store", required=True, help="page store holding the pages to add")
    a.add_argument("--pages", nargs="*", default=None, help="page ids (default: all not yet indexed)")
    a.add_argument("--replace", action="store_true", help="re-embed pages already in the index")
    _model_options(a)
    a.set_defaults(func=run_add)

    d = sub.add_parser("delete", help="remove pages by id")
    d.add_argument("--index", required=True, help="index directory")
    d.add_argument(
        "page_ids", nargs="+", metavar="PAGE_ID", help="ids of the pages to remove (see `evidra pages`)"
    )
    d.set_defaults(func=run_delete)

    s = sub.add_parser("search", help="top-k pages for one or more queries")
    s.add_argument("--index", required=True, help="index directory")
    s.add_argument("queries", nargs="+", metavar="QUERY", help="one or more queries")
    s.add_argument("-k", type=int, default=5, help="pages per query")
    s.add_argument("--exclude", nargs="*", default=(), help="page ids to skip")
    s.add_argument(
        "--encoder",
        default=None,
        metavar="DIR",
        help="encoder checkpoint, if moved since `index build` (default: the one the index recorded)",
    )
    s.add_argument(
        "--store",
        help="the page store the index covers, for file names, titles and --where (default: the one "
        "`index build --store` recorded)",
    )
    s.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="only pages whose document matches: file=NAME, doc=ID, page=N, title=TEXT or a --meta key "
        "(repeatable)",
    )
    s.add_argument("--json", action="store_true", help="one JSON object per query")
    _model_options(s)
    s.set_defaults(func=_run_search)

    e = sub.add_parser("eval", help="Recall@k, MRR@k, nDCG@k from queries + qrels or a benchmark")
    e.add_argument(
        "--index",
        required=True,
        action="append",
        help="index directory (repeat: hybrid search, fused by --fusion, to measure a fusion)",
    )
    e.add_argument("--queries", help="JSONL/TSV of (query id, text)")
    e.add_argument("--qrels", help="JSONL/TSV of (query-id, corpus-id, score)")
    e.add_argument("--benchmark", help="benchmark folder instead of --queries/--qrels")
    e.add_argument("--benchmark-format", choices=_FORMATS, default="auto", help="--benchmark layout")
    e.add_argument("--dataset", help="or a benchmark loader's questions, their gold pages as qrels")
    e.add_argument("--data", help="--dataset: the benchmark's files")
    e.add_argument(
        "--option", action="append", default=[], metavar="KEY=VALUE", help="--dataset: loader option"
    )
    e.add_argument("-k", type=int, nargs="+", default=[1, 5, 10], help="cut-offs of the metrics")
    e.add_argument("--json", action="store_true", help="print the metrics as one JSON object")
    _model_options(e)
    add_fusion_args(e)
    e.set_defaults(func=_run_eval)


def _model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--batch-size", type=int, default=8, help="pages or queries per forward pass")
    p.add_argument("--device", default="auto", help="auto | cpu | cuda")
    p.add_argument("--dtype", default="float32", help="encoder weights: float32 | bfloat16 | float16")
    scoring_options(p)


def scoring_options(p: argparse.ArgumentParser) -> None:
    """``--compute-dtype`` and ``--maxsim-kernel``: how the exact store scores
    (``evidra.retrieval.kernels.compute_dtype``, ``evidra.retrieval.kernels.choice``)."""
    p.add_argument(
        "--compute-dtype",
        choices=("auto", "float32", "bfloat16", "float16"),
        default="auto",
        help="exact store: the dtype MaxSim scores in (auto: the fastest exact one on this machine)",
    )
    p.add_argument(
        "--storage-dtype",
        choices=("auto", "float16", "bfloat16", "float32"),
        default="auto",
        help="exact store: the dtype pages are held in memory in (auto: 16-bit, half of float32's "
        "memory; where MaxSim scores in float32 the pages are widened block by block)",
    )
    p.add_argument(
        "--maxsim-kernel",
        choices=("auto", "torch", "triton", "avx512", "amx", "avx512_bf16"),
        default="auto",
        help="exact store: auto (the fused Triton kernel on CUDA when installed; a fused C kernel, "
        "built with the system compiler at first use, for float32 on an AVX-512 CPU (avx512) and for "
        "bfloat16 on a CPU with AMX (amx) or with AVX512_BF16 (avx512_bf16); else torch; a reopened "
        "index keeps the kernel it recorded where it runs), torch, triton, avx512, amx, avx512_bf16",
    )


def _build_pages(args: argparse.Namespace) -> list[Page]:
    from evidra.core.errors import InvalidInputError
    from evidra.corpus import PageStore
    from evidra.eval.retrieval import benchmark_pages
    from evidra.retrieval.lifecycle.backends import text_index

    if sum(x is not None for x in (args.store, args.corpus, args.dataset)) != 1:
        raise InvalidInputError(
            "pass exactly one of --store (a page store from `evidra ingest`), --corpus (a retrieval "
            "benchmark folder) or --dataset NAME --data PATH (a benchmark loader's pages)"
        )
    if args.store is not None:
        found = PageStore.open(args.store).pages()
        if not found:
            raise InvalidInputError(
                f"page store {args.store} holds no pages; add documents with `evidra ingest <documents> "
                f"--store {args.store}`"
            )
        return found
    if args.dataset is not None:
        pages, source = _dataset_pages(args), args.dataset
    else:
        # absolute paths: the index refers to these images after this command ends, from any directory
        root = Path(args.corpus).resolve()
        image_dir = Path(args.image_dir or Path(args.out) / "images").resolve()
        pages = benchmark_pages(root, _layout(str(root), args.corpus_format), image_dir=image_dir)
        source = args.corpus
    if text_index(args.encoder) and not args.ocr and not any(p.words for p in pages):
        raise InvalidInputError(
            f"the pages of {source} are images without a text layer; {args.encoder} needs --ocr (evidra[ocr])"
        )
    return pages


def _dataset_pages(args: argparse.Namespace) -> list[Page]:
    """Every page of a loader's samples, once: page ids are the loader's, as training uses them."""
    pages: dict[str, Page] = {}
    for sample in _load_dataset(args):
        pages.update((p.id, p) for p in sample.pages if p.id not in pages)
    return list(pages.values())


def run_build(args: argparse.Namespace) -> int:
    from evidra.cli._outputs import removed_on_failure
    from evidra.models.references import check_model_ref, written_as_checkpoint
    from evidra.retrieval.encoders.bm25 import BM25Params
    from evidra.retrieval.lifecycle.index_folder import check_encoder_args

    BM25Params(language=args.language)  # an unknown language fails before any page is read
    qdrant = _qdrant_spec(args)  # option errors first, before any page is read
    check_encoder_args(args.encoder, args.model)
    if args.encoder != "bm25" and written_as_checkpoint(args.model):  # else the encoder's own name
        check_model_ref(args.model, f"{args.encoder} encoder", option="--model")  # before any page is read
    with removed_on_failure(args.out):  # a new --out (and parents made for it) is gone again on failure
        engine = _build(args, qdrant)
    with engine:
        scoring = getattr(engine.index, "compute_dtype", "")  # the exact store's; others have none
        held = getattr(engine.index, "storage_dtype", "")
        print(
            f"indexed {len(engine.index)} pages with {args.encoder} ({engine.spec.backend}"
            f"{f', scoring in {scoring}, held in {held}' if scoring else ''}) into {args.out}"
        )
    if args.store is not None:  # `evidra ask --store S` then finds this index without --index
        from evidra.corpus import PageStore
        from evidra.retrieval.lifecycle.manifest import note_store

        note_store(args.out, args.store)  # `index search` then names files and pages, and filters
        with PageStore.open(args.store) as store:
            store.register_index(args.out)
    return 0


def _build(args: argparse.Namespace, qdrant: QdrantSpec | None) -> Engine:
    """The pages of the build's source (a benchmark's images extracted under ``--out``), embedded."""
    from evidra.retrieval.encoders.bm25 import BM25Params
    from evidra.retrieval.lifecycle.backends import text_index
    from evidra.retrieval.lifecycle.index_folder import build_index

    pages = _build_pages(args)
    enc_opts, maxsim = _options(args)
    desc = "reading text" if text_index(args.encoder) else "embedding"
    with LazyBar(total=len(pages), unit="page", desc=desc) as progress:
        return build_index(
            pages,
            args.out,
            args.encoder,
            args.model,
            options=enc_opts,
            maxsim=maxsim,
            ocr=args.ocr,
            bm25=BM25Params(language=args.language, stem=args.stem),
            qdrant=qdrant,
            progress=progress,
            overwrite=args.overwrite,
        )


def _qdrant_spec(args: argparse.Namespace) -> QdrantSpec | None:
    from evidra.core.errors import InvalidInputError
    from evidra.retrieval.lifecycle.index_folder import QdrantSpec

    if args.backend != "qdrant":
        if args.qdrant_url:
            raise InvalidInputError("--qdrant-url needs --backend qdrant")
        return None
    return QdrantSpec(
        url=args.qdrant_url or "",
        path="" if args.qdrant_url else "qdrant",  # Qdrant Edge's shard, inside the index folder
        collection=args.collection,
        candidates=args.prefetch,
        pooling=args.pooling,
        prefer_grpc=args.grpc,
        key_from_user=bool(args.qdrant_url),  # --qdrant-url is the user's own flag
    )


def run_add(args: argparse.Namespace) -> int:
    from evidra.core.errors import InvalidInputError
    from evidra.corpus import PageStore
    from evidra.retrieval.lifecycle.index_folder import open_index

    enc_opts, maxsim = _options(args)
    store = PageStore.open(args.store)
    with open_index(args.index, options=enc_opts, maxsim=maxsim) as engine:
        if args.pages:
            unknown = [p for p in args.pages if p not in store]
            if unknown:
                raise InvalidInputError(f"pages not in store {args.store}: {unknown[:5]}")
            pages = [store.get(p) for p in args.pages]
        else:
            have = set(engine.index.page_ids())
            pages = [p for p in store.pages() if args.replace or p.id not in have]
        desc = "reading text" if engine.encoder is None else "embedding"
        with LazyBar(total=len(pages), unit="page", desc=desc) as progress:
            engine.add(pages, replace=args.replace, progress=progress)
        print(f"added {len(pages)} pages; the index now holds {len(engine.index)}")
    return 0


def run_delete(args: argparse.Namespace) -> int:
    from evidra.retrieval.encoders.bm25 import BM25Retriever
    from evidra.retrieval.lifecycle.index_folder import open_store_only, save_bm25

    index = open_store_only(args.index)
    try:
        n = index.delete(args.page_ids)
        if isinstance(index, BM25Retriever):
            save_bm25(Path(args.index), index)
        print(f"deleted {n} of {len(args.page_ids)} pages; the index now holds {len(index)}")
    finally:
        if not isinstance(index, BM25Retriever):
            index.close()
    return 0


def _run_search(args: argparse.Namespace) -> int:
    from evidra.cli._search import run_search

    return run_search(args)


def _run_eval(args: argparse.Namespace) -> int:
    from evidra.cli._index_eval import run_eval

    return run_eval(args)
