"""``evidra ingest DIR --store S``: render PDFs and images into a page store."""

from __future__ import annotations

import argparse

from evidra.cli._progress import LazyBar
from evidra.corpus.limits import (
    DEFAULT_MAX_DOC_PIXELS,
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_WORKER_BYTES,
    DEFAULT_PAGE_TIMEOUT_S,
    MIB,
)
from evidra.corpus.pdf import DEFAULT_MAX_PAGES, DEFAULT_MAX_PIXELS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "ingest",
        help="ingest a folder of PDFs and images into a page store",
        description="Render every PDF page and image under DIR into the page store S, keeping the PDF "
        "text layer with word boxes. Re-ingesting the same content adds nothing; broken or encrypted "
        "files, and files over the caps, are skipped with a warning. Documents are parsed in worker "
        "processes under a memory cap and a deadline per page, so a hostile file costs that file only.",
    )
    p.add_argument("root", metavar="DIR", help="folder (searched recursively) or single file to ingest")
    p.add_argument("--store", required=True, metavar="S", help="page store directory (created if missing)")
    p.add_argument("--dpi", type=float, default=150.0, help="PDF render resolution (default: 150)")
    p.add_argument("--no-recursive", action="store_true", help="do not descend into sub-folders")
    p.add_argument(
        "--max-pixels",
        type=int,
        default=DEFAULT_MAX_PIXELS,
        help=f"pixel cap per page (default: {DEFAULT_MAX_PIXELS}); larger PDF pages are rendered at a "
        "lower dpi to fit, larger images are skipped",
    )
    p.add_argument(
        "--max-pages",
        type=int,
        default=DEFAULT_MAX_PAGES,
        help=f"page (or image frame) cap per file (default: {DEFAULT_MAX_PAGES}); longer files are skipped",
    )
    p.add_argument(
        "--max-file-mb",
        type=float,
        default=DEFAULT_MAX_FILE_BYTES / MIB,
        help=f"size cap per file in MiB (default: {DEFAULT_MAX_FILE_BYTES // MIB}); larger files are "
        "skipped before they are read",
    )
    p.add_argument(
        "--max-doc-pixels",
        type=int,
        default=DEFAULT_MAX_DOC_PIXELS,
        help=f"pixel cap per file, all pages together (default: {DEFAULT_MAX_DOC_PIXELS}); larger files "
        "are skipped before any page renders",
    )
    p.add_argument(
        "--max-worker-mb",
        type=int,
        default=DEFAULT_MAX_WORKER_BYTES // MIB,
        help=f"memory (address space) cap in MiB of the worker process that parses and renders a file "
        f"(default: {DEFAULT_MAX_WORKER_BYTES // MIB}); a file that needs more is skipped",
    )
    p.add_argument(
        "--page-timeout",
        type=float,
        default=DEFAULT_PAGE_TIMEOUT_S,
        help=f"seconds a worker may take to open a file or render one page (default: "
        f"{DEFAULT_PAGE_TIMEOUT_S:g}); a slower file is skipped",
    )
    p.add_argument(
        "--meta",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="metadata of every ingested document, for --where filters (repeatable; a file's sidecar "
        "<file>.meta.json adds its own)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from evidra.corpus import IngestProgress, Limits, ingest
    from evidra.corpus.metadata import parse_meta

    meta = parse_meta(args.meta)

    limits = Limits(
        max_pixels=args.max_pixels,
        max_pages=args.max_pages,
        max_file_bytes=int(args.max_file_mb * MIB),
        max_doc_pixels=args.max_doc_pixels,
        max_worker_bytes=args.max_worker_mb * MIB,
        page_timeout_s=args.page_timeout,
    )
    with LazyBar(desc="ingest", unit="file") as bar:

        def show(p: IngestProgress) -> None:
            bar.move_to(p.files_done, p.files_total, pages=p.pages)

        report = ingest(
            args.root,
            args.store,
            dpi=args.dpi,
            recursive=not args.no_recursive,
            limits=limits,
            progress=show,
            meta=meta,
        )
    print(report.summary())  # each failed file was named by a warning as it was skipped
    stored = len(report.added) + len(report.skipped)
    return 1 if report.failed and stored == 0 else 0
