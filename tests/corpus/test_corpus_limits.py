"""Ingest under hostile input: pixel and page caps, streaming, multi-frame images, leftovers."""

from __future__ import annotations

import importlib
import io
import os
import struct
import subprocess
import sys
import weakref
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.corpus import Limits, PageStore, ingest
from evidra.corpus.pdf import RenderedPage, capped_scale
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

ingest_module = importlib.import_module("evidra.corpus.ingest")


def _pdf(n_pages: int, width: float = 200, height: float = 100) -> bytes:
    pages = []
    for i in range(n_pages):
        canvas = PdfCanvas(width, height)
        canvas.text(10, height / 2, f"page {i + 1}", 12)
        pages.append(canvas)
    return write_pdf(pages)


def _tiff(sizes: list[tuple[int, int]]) -> bytes:
    frames = [Image.new("RGB", size, (30 * i, 100, 200)) for i, size in enumerate(sizes)]
    out = io.BytesIO()
    frames[0].save(out, format="TIFF", save_all=True, append_images=frames[1:])
    return out.getvalue()


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width x height`` but whose data is a few bytes (a pixel bomb)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(b"\0" * 16))
        + chunk(b"IEND", b"")
    )


def test_capped_scale_keeps_small_pages_and_shrinks_huge_ones() -> None:
    assert capped_scale(612, 792, 2.0, 50_000_000) == 2.0
    # 14,400 pt square at 150 dpi would be 30000 x 30000 = 900 Mpx; at the cap each side is
    # floor(sqrt(50e6)) = 7071 px or just under (PDFium rounds up, so the scale leaves a margin).
    scale = capped_scale(14_400, 14_400, 150 / 72, 50_000_000)
    side = -(-14_400 * scale // 1)
    assert 7000 <= side <= 7071 and side * side <= 50_000_000


def test_huge_pdf_page_is_rendered_under_the_pixel_cap(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "poster.pdf").write_bytes(_pdf(1, 14_400, 14_400))  # the largest page PDF allows
    (docs / "small.pdf").write_bytes(_pdf(1))
    report = ingest(docs, tmp_path / "store", dpi=150, limits=Limits(max_pixels=250_000))
    assert report.failed == () and len(report.added) == 2
    with PageStore.open(tmp_path / "store") as store:
        by_source = {p.source: p for p in store.pages()}
    poster, small = by_source["poster.pdf"], by_source["small.pdf"]
    assert poster.width * poster.height <= 250_000 and poster.width >= 490  # 500 x 500 at most
    assert poster.dpi is not None and poster.dpi < 3  # 500 px / 200 inches
    with Image.open(poster.image_path) as im:
        assert im.size == (poster.width, poster.height)
    assert small.dpi == 150 and (small.width, small.height) == (417, 209)
    # the words follow the lowered resolution: "page 1" sits at the page's left middle
    word = poster.words[0]
    assert word.box.x1 < poster.width * 0.01 and abs(word.box.y2 - poster.height / 2) < 2
    assert "poster.pdf: page 1 is 14400 x 14400 pt; rendered at" in caplog.text


def test_image_over_the_pixel_cap_is_refused_before_decoding(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bomb.png").write_bytes(_png_claiming(12_000, 12_000))  # 144 Mpx, 70 bytes
    Image.new("RGB", (800, 700)).save(docs / "big.png")
    Image.new("RGB", (300, 200)).save(docs / "ok.png")
    report = ingest(docs, tmp_path / "store", limits=Limits(max_pixels=500_000))
    reasons = {f.path: f.reason for f in report.failed}
    assert reasons["bomb.png"] == (
        "bomb.png is 12000x12000 = 144 Mpx, over the cap of 0.5 Mpx per page; downscale it or "
        "raise the cap (--max-pixels 144000000)"
    )
    assert reasons["big.png"].startswith("big.png is 800x700 = 1 Mpx, over the cap of 0.5 Mpx")
    assert len(report.added) == 1  # ok.png


def test_default_cap_refuses_a_144_megapixel_png(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "bomb.png").write_bytes(_png_claiming(12_000, 12_000))
    report = ingest(docs, tmp_path / "store")
    assert len(report.failed) == 1 and "over the cap of 50 Mpx per page" in report.failed[0].reason


def test_multi_frame_tiff_is_decoded_frame_by_frame_under_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "scan.tiff").write_bytes(_tiff([(64, 48)] * 3))
    (docs / "long.tiff").write_bytes(_tiff([(16, 16)] * 5))
    (docs / "late_bomb.tiff").write_bytes(_tiff([(32, 32), (900, 900)]))
    alive = _track_live_images(monkeypatch)
    report = ingest(docs, tmp_path / "store", limits=Limits(max_pixels=100_000, max_pages=4))
    assert len(report.added) == 3  # the three frames of scan.tiff
    reasons = {f.path: f.reason for f in report.failed}
    assert reasons["long.tiff"] == (
        "long.tiff has 5 frames, over the cap of 4 pages per file; split it or raise the cap (--max-pages 5)"
    )
    assert reasons["late_bomb.tiff"].startswith("frame 2 of late_bomb.tiff is 900x900 = 1 Mpx, over the cap")
    assert max(alive) <= 2  # one frame in hand, at most one more not yet collected
    with PageStore.open(tmp_path / "store") as store:
        assert [p.page_number for p in store.pages()] == [1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "store" / "pages").iterdir()) == sorted(
        f"{pid}.png" for pid in report.added
    )  # late_bomb.tiff's first frame was staged and removed again


def test_pdf_over_the_page_cap_is_refused_and_named(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.pdf").write_bytes(_pdf(3))
    report = ingest(docs, tmp_path / "store", limits=Limits(max_pages=2))
    assert [(f.path, f.reason) for f in report.failed] == [
        (
            "long.pdf",
            "long.pdf has 3 pages, over the cap of 2 pages per file; split it or raise the cap "
            "(--max-pages 3)",
        )
    ]
    with pytest.raises(InvalidInputError, match="must be positive"):
        Limits(max_pixels=0)


def _sparse(path: Path, size: int) -> Path:
    """A file of ``size`` bytes that occupies (almost) no disk: its length is set, nothing written."""
    with path.open("wb") as f:
        f.truncate(size)
    return path


def test_a_file_over_the_size_cap_is_skipped_unread_and_the_run_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(1))
    _sparse(docs / "huge.pdf", 600 * 2**20 + 1)  # over the default cap of 512 MiB
    rendered: list[str] = []
    real = ingest_module._render

    def tracked(path: Path, *args: object) -> Iterator[RenderedPage]:
        rendered.append(path.name)
        return real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(ingest_module, "_render", tracked)
    report = ingest(docs, tmp_path / "store", dpi=36)
    # 600 MiB + 1 byte = 629145601 bytes; --max-file-mb rounds the size up to whole MiB: 601
    reason = (
        "huge.pdf is 600.0 MiB (629145601 bytes), over the cap of 512 MiB per file; raise the cap "
        "(--max-file-mb 601, or Limits(max_file_bytes=...))"
    )
    assert [(f.path, f.reason) for f in report.failed] == [("huge.pdf", reason)]
    assert len(report.added) == 1 and rendered == ["a.pdf"]
    assert f"skipping huge.pdf: {reason}" in caplog.text


def test_the_size_cap_admits_a_file_of_exactly_its_size(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    _sparse(docs / "at.png", 2**20)
    _sparse(docs / "over.png", 2**20 + 1)
    report = ingest(docs, tmp_path / "store", limits=Limits(max_file_bytes=2**20))
    reasons = {f.path: f.reason for f in report.failed}
    assert reasons["at.png"].startswith("at.png is not a readable image")  # read, then found to be zeros
    assert reasons["over.png"] == (
        "over.png is 1.0 MiB (1048577 bytes), over the cap of 1 MiB per file; raise the cap "
        "(--max-file-mb 2, or Limits(max_file_bytes=...))"
    )
    with pytest.raises(InvalidInputError, match="max_file_bytes must be positive"):
        Limits(max_file_bytes=0)


def test_reading_a_small_file_does_not_allocate_the_size_cap(tmp_path: Path) -> None:
    import tracemalloc

    path = tmp_path / "small.pdf"
    path.write_bytes(b"%PDF" * 64)
    tracemalloc.start()
    try:
        data = ingest_module._read_capped(path, "small.pdf", 512 * 2**20)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert data == b"%PDF" * 64 and peak < 2**20  # f.read(cap + 1) would allocate 512 MiB first


def test_a_file_that_grows_after_its_size_was_checked_is_read_whole_or_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_stat = Path.stat
    stale: dict[Path, int] = {}

    def stat(self: Path, **kwargs: Any) -> os.stat_result:
        st = real_stat(self, **kwargs)
        if self in stale:  # the size seen before the file grew, once
            fields = list(st)
            fields[6] = stale.pop(self)  # st_size
            return os.stat_result(fields)
        return st

    monkeypatch.setattr(Path, "stat", stat)
    path = tmp_path / "grows.pdf"
    path.write_bytes(b"x" * 1500)
    stale[path] = 1000
    assert ingest_module._read_capped(path, "grows.pdf", 2000) == b"x" * 1500  # not cut at 1000
    path.write_bytes(b"x" * 3000)
    stale[path] = 1000
    with pytest.raises(CorpusError, match=r"^grows.pdf is 0.0 MiB \(3000 bytes\), over the cap"):
        ingest_module._read_capped(path, "grows.pdf", 2000)


def test_cli_max_file_mb_skips_the_large_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from evidra.cli.main import main

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(1))
    _sparse(docs / "b.pdf", 3 * 2**20)
    argv = ["ingest", str(docs), "--store", str(tmp_path / "store"), "--dpi", "36", "--max-file-mb", "2.5"]
    assert main(argv) == 0  # a page was stored: the skipped file does not fail the run
    assert capsys.readouterr().out.startswith("1 pages added, 0 unchanged, 1 files failed, 2 files seen")
    skipped = [r.getMessage() for r in caplog.records if r.getMessage().startswith("skipping")]
    assert skipped == [
        "skipping b.pdf: b.pdf is 3.0 MiB (3145728 bytes), over the cap of 2.5 MiB per file; raise the "
        "cap (--max-file-mb 3, or Limits(max_file_bytes=...))"
    ]


def _track_live_images(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Wrap ingest's renderer; returns a list that records how many page images are alive at each page."""
    real = ingest_module._render
    live: set[int] = set()
    counts: list[int] = []

    def tracked(*args: object) -> Iterator[RenderedPage]:
        for page in real(*args):  # type: ignore[arg-type]
            key = id(page.image)
            live.add(key)
            weakref.finalize(page.image, live.discard, key)
            counts.append(len(live))
            yield page

    monkeypatch.setattr(ingest_module, "_render", tracked)
    return counts


def test_pages_stream_to_disk_one_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "long.pdf").write_bytes(_pdf(300, 100, 60))
    alive = _track_live_images(monkeypatch)
    report = ingest(docs, tmp_path / "store", dpi=36)
    assert len(report.added) == 300 and len(alive) == 300
    assert max(alive) <= 2  # memory does not grow with the page count


def test_a_bad_file_among_good_ones_does_not_stop_the_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(2))
    (docs / "b_broken.pdf").write_bytes(b"%PDF-1.4\n" + os.urandom(200))
    (docs / "c_oom.pdf").write_bytes(_pdf(3))
    Image.new("RGB", (40, 30)).save(docs / "d.png")
    real = ingest_module._render

    def oom_on_c(path: Path, *args: object) -> Iterator[RenderedPage]:
        for page in real(path, *args):
            if path.name == "c_oom.pdf" and page.page_number == 2:
                raise MemoryError
            yield page

    monkeypatch.setattr(ingest_module, "_render", oom_on_c)
    report = ingest(docs, tmp_path / "store", dpi=72)
    assert [f.path for f in report.failed] == ["b_broken.pdf", "c_oom.pdf"]
    assert report.failed[1].reason.startswith("ran out of memory; lower --max-pixels or --dpi")
    assert len(report.added) == 3  # a.pdf's two pages and d.png
    assert "skipping c_oom.pdf: ran out of memory" in caplog.text
    assert sorted(p.name for p in (tmp_path / "store" / "pages").iterdir()) == sorted(
        f"{pid}.png" for pid in report.added
    )


def test_staging_files_of_a_killed_ingest_are_removed_by_the_next(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.pdf").write_bytes(_pdf(1))
    ingest(docs, tmp_path / "store", dpi=72)
    pages = tmp_path / "store" / "pages"
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)  # exited, so no process has this id (until it is reused)
    leftovers = [
        pages / f".abc-p0001.{dead_pid}.x1y2.tmp",
        pages / ".abc-p0002.k3j4.tmp",
    ]  # new and old names
    live = pages / f".abc-p0003.{os.getpid()}.z9.tmp"  # a running ingest's file
    for path in [*leftovers, live]:
        path.write_bytes(b"partial png")
    (docs / "b.pdf").write_bytes(_pdf(2))
    report = ingest(docs, tmp_path / "store", dpi=72)
    assert len(report.added) == 2 and not any(p.exists() for p in leftovers) and live.exists()


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ru_maxrss is in KiB on Linux only")
def test_peak_memory_does_not_grow_with_the_page_count(tmp_path: Path) -> None:
    """Peak RSS of a fresh process ingesting 100 and then 2,000 Letter pages (at 72 dpi)."""
    script = """
import resource, sys
from pathlib import Path
from evidra.corpus import ingest
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
n, root = int(sys.argv[1]), Path(sys.argv[2])
pages = []
for i in range(n):
    canvas = PdfCanvas(612, 792)
    canvas.text(72, 700, f"page {i}", 12)
    pages.append(canvas)
(root / "docs").mkdir(parents=True)
(root / "docs" / "long.pdf").write_bytes(write_pdf(pages))
del pages
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert len(ingest(root / "docs", root / "store", dpi=72).added) == n
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    growth = {}
    for n in (100, 2000):
        done = subprocess.run(
            [sys.executable, "-c", script, str(n), str(tmp_path / str(n))],
            capture_output=True,
            text=True,
            env=env,
            check=True,
            timeout=600,
        )
        growth[n] = int(done.stdout) / 1024  # MB (ru_maxrss is in KiB on Linux)
    # keeping every page would add ~1.5 MB per page (612 x 792 x 3 bytes): 2.8 GB for 1,900 more
    assert growth[2000] - growth[100] < 50, growth
