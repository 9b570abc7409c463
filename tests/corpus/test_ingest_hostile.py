"""Ingest over hostile documents: bombs cost their file only, a cancel abandons one file whole, a
document pixel cap, and files of other types counted instead of silently ignored."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from pdf_bombs import deflate_bomb, recursive_xobject, tiny_glyphs
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.corpus import Cancelled, IngestProgress, InProcess, Limits, PageStore, RenderPool, ingest
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

MIB = 1 << 20


def _pdf(n_pages: int, text: str = "page") -> bytes:
    pages = []
    for i in range(n_pages):
        canvas = PdfCanvas(200, 100)
        canvas.text(10, 50, f"{text} {i + 1}", 12)
        pages.append(canvas)
    return write_pdf(pages)


def _store_files(store: Path) -> list[str]:
    return sorted(p.name for p in (store / "pages").iterdir())


def test_bombs_in_a_folder_are_named_and_the_good_files_ingested(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(2))
    (docs / "b_inflate.pdf").write_bytes(deflate_bomb(1024))  # 1 GiB of spaces in 1 MB
    (docs / "c_glyphs.pdf").write_bytes(tiny_glyphs(1_000_000))  # ~13 s of PDFium text page
    Image.new("RGB", (40, 30), (9, 9, 9)).save(docs / "d.png")
    (docs / "e.pdf").write_bytes(_pdf(1, "last"))
    limits = Limits(max_worker_bytes=512 * MIB, page_timeout_s=2)
    report = ingest(docs, tmp_path / "store", dpi=72, limits=limits)
    reasons = {f.path: f.reason for f in report.failed}
    assert reasons == {
        "b_inflate.pdf": "b_inflate.pdf: too much memory (over the 512 MiB worker cap at page 1); if the "
        "file is trusted, raise the cap (--max-worker-mb 1024, or Limits(max_worker_bytes=...)) or lower "
        "--dpi",
        "c_glyphs.pdf": "c_glyphs.pdf: too slow (over 2 s at page 1); if the file is trusted, raise the "
        "deadline (--page-timeout 4, or Limits(page_timeout_s=...))",
    }
    assert len(report.added) == 4  # a.pdf's two pages, d.png, e.pdf
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert skipped == [f"skipping {path}: {reason}" for path, reason in reasons.items()]  # one line each
    assert _store_files(tmp_path / "store") == sorted(f"{pid}.png" for pid in report.added)


def test_a_cancel_abandons_the_file_whole_and_starts_no_other(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(1, "first"))
    (docs / "b.pdf").write_bytes(_pdf(3, "second"))
    (docs / "c.pdf").write_bytes(_pdf(1, "third"))
    cancel = threading.Event()

    def cancel_after_two_pages(p: IngestProgress) -> None:
        if p.pages == 2:  # a.pdf's page, then b.pdf's first
            cancel.set()

    report = ingest(docs, tmp_path / "store", dpi=72, progress=cancel_after_two_pages, cancel=cancel)
    assert [(f.path, f.reason) for f in report.failed] == [("b.pdf", "cancelled")]
    assert report.cancelled and report.not_started == ("c.pdf",) and len(report.added) == 1
    assert report.summary().endswith("; cancelled, 1 files not started")
    with PageStore.open(tmp_path / "store") as store:
        assert store.sources() == ["a.pdf"]
    assert _store_files(tmp_path / "store") == [f"{report.added[0]}.png"]  # no staged page of b.pdf


@pytest.mark.parametrize("renderer", [None, InProcess()], ids=["workers", "in-process"])
def test_a_cancel_set_before_the_run_starts_nothing(tmp_path: Path, renderer: InProcess | None) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(1))
    (docs / "b.pdf").write_bytes(_pdf(1, "other"))
    cancel = threading.Event()
    cancel.set()
    report = ingest(docs, tmp_path / "store", dpi=72, cancel=cancel, renderer=renderer)
    assert report.cancelled and report.not_started == ("a.pdf", "b.pdf")
    assert report.added == () and report.failed == ()


def test_in_process_rendering_raises_cancelled_between_pages() -> None:
    cancel = threading.Event()
    pages = InProcess().render("pdf", _pdf(3), "three.pdf", 72, Limits(), cancel)
    assert next(pages).page_number == 1
    cancel.set()
    with pytest.raises(Cancelled):
        next(pages)


def test_a_cancel_from_another_thread_stops_a_slow_page(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "slow.pdf").write_bytes(tiny_glyphs(1_000_000))
    cancel = threading.Event()
    threading.Timer(0.5, cancel.set).start()
    with RenderPool(512 * MIB) as pool:
        report = ingest(docs, tmp_path / "store", dpi=72, cancel=cancel, renderer=pool)
        assert pool.worker_pids() == []  # killed mid-page, not left running
    assert [(f.path, f.reason) for f in report.failed] == [("slow.pdf", "cancelled")]


def test_unsupported_files_are_counted_by_suffix(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evidra.cli.main import main

    docs = tmp_path / "docs"
    (docs / "notes").mkdir(parents=True)
    for i in range(14):
        (docs / "notes" / f"n{i:02d}.md").write_text("# notes")
    (docs / "todo.txt").write_text("later")
    (docs / ".DS_Store").write_bytes(b"hidden: not counted")
    report = ingest(docs, tmp_path / "store")
    assert report.files_seen == 0 and len(report.unsupported) == 15
    assert report.unsupported[0] == "notes/n00.md" and report.unsupported[-1] == "todo.txt"
    assert report.summary().split("; ", 1)[1] == (
        "15 files skipped as unsupported (.md x14, .txt x1; ingest reads .bmp, .jpeg, .jpg, .pdf, .png, "
        ".tif, .tiff, .webp)"
    )
    (docs / "a.pdf").write_bytes(_pdf(1))
    (docs / "a.pdf.meta.json").write_text('{"year": 2024}')  # a sidecar belongs to a.pdf
    assert main(["ingest", str(docs), "--store", str(tmp_path / "store2"), "--dpi", "36"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("1 pages added, 0 unchanged, 0 files failed, 1 files seen in ")
    assert "; 15 files skipped as unsupported (.md x14, .txt x1; " in out


def test_the_document_pixel_cap_refuses_before_any_page_renders(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.pdf").write_bytes(_pdf(3))  # 3 pages of 200 x 100 pt: 60,000 pixels at 72 dpi
    frames = [Image.new("RGB", (100, 100)) for _ in range(2)]
    out = io.BytesIO()
    frames[0].save(out, format="TIFF", save_all=True, append_images=frames[1:])
    (docs / "scan.tiff").write_bytes(out.getvalue())  # 20,000 pixels
    (docs / "short.pdf").write_bytes(_pdf(1))
    report = ingest(docs, tmp_path / "store", dpi=72, limits=Limits(max_doc_pixels=50_000))
    assert [(f.path, f.reason) for f in report.failed] == [
        (
            "long.pdf",
            "long.pdf is 60000 pixels over its 3 pages at 72 dpi, over the cap of 50000 pixels per document; "
            "split it or lower --dpi, or raise the cap (--max-doc-pixels 60000)",
        )
    ]
    assert len(report.added) == 3  # scan.tiff's two frames, short.pdf
    tight = ingest(docs, tmp_path / "store2", dpi=72, limits=Limits(max_doc_pixels=15_000))
    reasons = {f.path: f.reason for f in tight.failed}
    assert reasons["scan.tiff"] == (
        "scan.tiff is 20000 pixels over its 2 pages, over the cap of 15000 pixels per document; split it, "
        "or raise the cap (--max-doc-pixels 20000)"
    )


def test_cli_shows_the_new_caps_and_passes_them_on(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from evidra.cli.main import main

    with pytest.raises(SystemExit):
        main(["ingest", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for option in (
        "--max-doc-pixels MAX_DOC_PIXELS pixel cap per file, all pages together (default: 25000000000)",
        "--max-worker-mb MAX_WORKER_MB memory (address space) cap in MiB",
        "(default: 2048)",
        "--page-timeout PAGE_TIMEOUT seconds a worker may take to open a file or render one page",
        "(default: 60)",
    ):
        assert option in help_text
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.pdf").write_bytes(_pdf(3))
    argv = ["ingest", str(docs), "--store", str(tmp_path / "s"), "--dpi", "72", "--max-doc-pixels", "50000"]
    assert main(argv) == 1  # nothing stored
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")] == [
        "skipping long.pdf: long.pdf is 60000 pixels over its 3 pages at 72 dpi, over the cap of 50000 "
        "pixels per document; split it or lower --dpi, or raise the cap (--max-doc-pixels 60000)"
    ]


def test_limits_refuse_caps_that_cannot_work() -> None:
    with pytest.raises(InvalidInputError, match=r"Limits\.max_doc_pixels must be positive, got 0"):
        Limits(max_doc_pixels=0)
    with pytest.raises(InvalidInputError, match="max_worker_bytes must be at least 128 MiB"):
        Limits(max_worker_bytes=64 * MIB)
    with pytest.raises(InvalidInputError, match="page_timeout_s must be a positive number"):
        Limits(page_timeout_s=float("nan"))


_MEASURE = """
import json, resource, sys
from pathlib import Path
from evidra.corpus import ingest
report = ingest(Path(sys.argv[1]), Path(sys.argv[2]), dpi=150)
print(json.dumps({
    "added": len(report.added),
    "failed": {f.path: f.reason for f in report.failed},
    # VmHWM is this process's own peak: ru_maxrss of RUSAGE_SELF survives exec, so it would carry
    # the peak of the process that started this one (pytest's, over 1 GB late in a run)
    "parent_peak_mib": next(int(line.split()[1]) for line in open("/proc/self/status")
                            if line.startswith("VmHWM:")) / 1024,
    "workers_peak_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
}))
"""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
def test_the_real_bombs_under_the_default_caps_leave_the_parent_small(tmp_path: Path) -> None:
    """The 632-byte recursion bomb grows PDFium past 4 GB in-process; here its worker stops at 2 GiB."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(2))
    (docs / "recursive.pdf").write_bytes(recursive_xobject())
    (docs / "inflate.pdf").write_bytes(deflate_bomb(2048))  # 2 GiB of spaces in 2 MB
    (docs / "z.pdf").write_bytes(_pdf(1, "last"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-c", _MEASURE, str(docs), str(tmp_path / "store")]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True, timeout=600)
    result = json.loads(done.stdout)
    assert result["added"] == 3
    for name in ("recursive.pdf", "inflate.pdf"):
        assert result["failed"][name].startswith(f"{name}: too much memory (over the 2048 MiB worker cap")
    assert result["workers_peak_mib"] > 1024  # the bombs did go off, in the workers
    assert result["parent_peak_mib"] < 400, result  # the parent holds one page at a time
