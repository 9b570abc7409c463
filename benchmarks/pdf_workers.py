"""What parsing and rendering PDFs in capped worker processes costs, on a normal 50-page PDF.

Ingest renders every document in a worker process (``evidra.corpus.render_pool``) so that a
hostile PDF costs its file only. This measures that isolation against rendering in-process
(``evidra.corpus.InProcess``, the way ingest worked before), on a 50-page Letter PDF of text
and shapes, at 150 dpi:

- ``ingest``: the whole ``ingest`` call into a new store (render, words, PNG encoding, SQLite);
- ``render``: the pages alone, iterated and dropped.

Workers are measured warm (a pool that already has a started worker, as ``ingest`` finds it
from its second call in a process on) and cold (a new pool each time, so the ~0.3 s start of a
worker's interpreter is included). Each figure is the median of ``--repeats`` runs.

    python benchmarks/pdf_workers.py --pages 50 --repeats 5

The last line is ``RESULT overhead_ratio=<warm workers / in-process, ingest> cold_ratio=<...>
render_ratio=<warm workers / in-process, render only>``.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from evidra.corpus import InProcess, Limits, Renderer, RenderPool, ingest
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

DPI = 150
WORDS = (
    "revenue",
    "quarter",
    "growth",
    "margin",
    "customer",
    "supply",
    "chain",
    "forecast",
    "region",
    "segment",
    "operating",
    "cash",
    "flow",
    "board",
    "report",
    "audit",
    "emission",
    "target",
    "energy",
    "water",
    "waste",
    "employee",
    "safety",
    "training",
    "policy",
    "risk",
)


def normal_pdf(n_pages: int) -> bytes:
    """``n_pages`` Letter pages, each a heading, 40 lines of 11 pt text, a table of boxes and rules."""
    pages = []
    for p in range(n_pages):
        canvas = PdfCanvas(612, 792)
        canvas.text(72, 80, f"Section {p + 1}: results of the year", 18)
        for line in range(40):
            words = [WORDS[(p * 7 + line * 3 + k) % len(WORDS)] for k in range(11)]
            canvas.text(72, 110 + line * 14, " ".join(words), 11)
        for row in range(4):
            top = 690 + row * 18
            canvas.rect(72, top, 300, top + 16, fill=(0.85, 0.9, 1.0), stroke=(0.2, 0.3, 0.6))
            canvas.line(320, 698 + row * 18, 540, 698 + row * 18, line_width=0.5)
        pages.append(canvas)
    return write_pdf(pages)


def _ingest_once(docs: Path, renderer: Renderer) -> float:
    store = Path(tempfile.mkdtemp(prefix="evidra-bench-store-"))
    try:
        start = time.perf_counter()
        report = ingest(docs, store / "s", dpi=DPI, renderer=renderer)
        elapsed = time.perf_counter() - start
    finally:
        shutil.rmtree(store, ignore_errors=True)
    assert report.failed == (), report.failed
    return elapsed


def _render_once(data: bytes, renderer: Renderer) -> float:
    start = time.perf_counter()
    pages = sum(1 for _ in renderer.render("pdf", data, "normal.pdf", DPI, Limits()))
    elapsed = time.perf_counter() - start
    assert pages > 0
    return elapsed


def _cold(run: Callable[[Renderer], float]) -> float:
    with RenderPool(Limits().max_worker_bytes) as pool:
        return run(pool)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    data = normal_pdf(args.pages)
    docs = Path(tempfile.mkdtemp(prefix="evidra-bench-docs-"))
    (docs / "normal.pdf").write_bytes(data)
    times: dict[str, list[float]] = {}
    with RenderPool(Limits().max_worker_bytes) as warm:
        _render_once(normal_pdf(1), warm)  # start its worker
        runs: dict[str, Callable[[], float]] = {
            "ingest, in-process": lambda: _ingest_once(docs, InProcess()),
            "ingest, workers warm": lambda: _ingest_once(docs, warm),
            "ingest, workers cold": lambda: _cold(lambda pool: _ingest_once(docs, pool)),
            "render, in-process": lambda: _render_once(data, InProcess()),
            "render, workers warm": lambda: _render_once(data, warm),
        }
        for _ in range(args.repeats):  # interleaved, so a slower moment of the machine hits all
            for name, run in runs.items():
                times.setdefault(name, []).append(run())
    shutil.rmtree(docs, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{args.pages}-page Letter PDF ({len(data) / 1024:.0f} KiB) at {DPI} dpi, median of {args.repeats}")
    print(f"{'what':<24} {'seconds':>8} {'ms/page':>8} {'vs in-process':>14}")
    for name, seconds in median.items():
        base = median[f"{name.split(',')[0]}, in-process"]
        print(f"{name:<24} {seconds:>8.3f} {1000 * seconds / args.pages:>8.1f} {seconds / base:>13.3f}x")
    ingest_base = median["ingest, in-process"]
    print(
        f"RESULT overhead_ratio={median['ingest, workers warm'] / ingest_base:.3f} "
        f"cold_ratio={median['ingest, workers cold'] / ingest_base:.3f} "
        f"render_ratio={median['render, workers warm'] / median['render, in-process']:.3f}"
    )


if __name__ == "__main__":
    main()
