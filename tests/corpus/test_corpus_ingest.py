"""Ingesting folders of PDFs and images: idempotence, failures, safety, transactions."""

from __future__ import annotations

import importlib
import logging
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.core.types import Box, Word, content_hash, make_page_id
from evidra.corpus import PageStore, ingest
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

# The package re-exports the function ``ingest``, which shadows the submodule's attribute name.
ingest_module = importlib.import_module("evidra.corpus.ingest")


def _pdf(*texts: str) -> bytes:
    pages = []
    for text in texts:
        canvas = PdfCanvas(300, 200)
        canvas.text(30, 50, text, 14)
        pages.append(canvas)
    return write_pdf(pages)


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    """report.pdf (3 pages), sub/memo.pdf (1 page), scan.png, photo.jpg."""
    root = tmp_path / "docs"
    (root / "sub").mkdir(parents=True)
    (root / "report.pdf").write_bytes(_pdf("first page", "second page", "third page"))
    (root / "sub" / "memo.pdf").write_bytes(_pdf("memo text"))
    Image.new("RGB", (120, 80), (200, 10, 10)).save(root / "scan.png")
    Image.new("RGB", (64, 48), (10, 200, 10)).save(root / "photo.jpg")
    (root / "notes.txt").write_text("not a document")
    return root


def _counts(store_dir: Path) -> tuple[int, int, int, int]:
    with sqlite3.connect(store_dir / "store.sqlite") as conn:
        pages = conn.execute("SELECT COUNT(*) FROM pages").fetchone()[0]
        words = conn.execute("SELECT COUNT(*) FROM words").fetchone()[0]
        files = conn.execute("SELECT COUNT(*) FROM files").fetchone()[0]
    return pages, words, files, len(list((store_dir / "pages").iterdir()))


def test_ingest_folder_recursively_with_content_ids(docs: Path, tmp_path: Path) -> None:
    report = ingest(docs, tmp_path / "store", dpi=72)
    report_hash = content_hash((docs / "report.pdf").read_bytes())
    assert len(report.added) == 6 and report.skipped == () and report.failed == ()
    assert report.files_seen == 4  # notes.txt is not a supported document
    assert {make_page_id(report_hash, n) for n in (1, 2, 3)} <= set(report.added)
    with PageStore.open(tmp_path / "store") as store:
        pages = store.pages()
        assert [(p.source, p.page_number) for p in pages] == [
            ("photo.jpg", 1),
            ("report.pdf", 1),
            ("report.pdf", 2),
            ("report.pdf", 3),
            ("scan.png", 1),
            ("sub/memo.pdf", 1),
        ]
        second = store.get(make_page_id(report_hash, 2))
        assert [w.text for w in second.words] == ["second", "page"]
        assert second.dpi == 72 and second.size == (300, 200)
        scan = next(p for p in pages if p.source == "scan.png")
        assert scan.words == () and scan.dpi is None and scan.size == (120, 80)
        assert scan.open_image().getpixel((5, 5)) == (200, 10, 10)
        assert Path(scan.image_path).is_absolute() and Path(scan.image_path).is_file()


def test_reingest_is_idempotent_and_does_not_render(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store_dir = tmp_path / "store"
    first = ingest(docs, store_dir, dpi=150)
    before = _counts(store_dir)

    def no_render(*args: object, **kwargs: object) -> None:
        raise AssertionError("an unchanged file was rendered again")

    monkeypatch.setattr(ingest_module, "_render", no_render)
    second = ingest(docs, store_dir, dpi=150)
    assert second.added == () and sorted(second.skipped) == sorted(first.added)
    assert _counts(store_dir) == before == (6, 8, 4, 6)  # 6 pages, 8 words, 4 sources, 6 PNGs
    assert second.elapsed_s < first.elapsed_s


def test_progress_counts_pages_as_stored_and_files_as_done(docs: Path, tmp_path: Path) -> None:
    from evidra.corpus import IngestProgress

    (docs / "broken.pdf").write_bytes(b"%PDF-1.4 not really")
    seen: list[IngestProgress] = []
    ingest(docs, tmp_path / "store", dpi=72, progress=seen.append)
    # sorted: broken.pdf (fails), photo.jpg (1 page), report.pdf (3), scan.png (1), sub/memo.pdf (1)
    steps = [(p.files_done, p.pages) for p in seen]
    assert steps == [(1, 0), (1, 1), (2, 1), (2, 2), (2, 3), (2, 4), (3, 4), (3, 5), (4, 5), (4, 6), (5, 6)]
    assert {p.files_total for p in seen} == {5}
    seen.clear()
    ingest(docs, tmp_path / "store", dpi=72, progress=seen.append)  # nothing rendered: one step per file
    assert [(p.files_done, p.pages) for p in seen] == [(1, 0), (2, 1), (3, 4), (4, 5), (5, 6)]


def test_identical_copy_maps_to_the_same_pages_and_records_both_sources(docs: Path, tmp_path: Path) -> None:
    shutil.copy(docs / "sub" / "memo.pdf", docs / "memo-copy.pdf")
    report = ingest(docs, tmp_path / "store", dpi=72)
    memo_id = make_page_id(content_hash((docs / "memo-copy.pdf").read_bytes()), 1)
    assert report.added.count(memo_id) == 1 and report.skipped == (memo_id,)  # memo-copy.pdf sorts first
    with PageStore.open(tmp_path / "store") as store:
        assert len(store) == 6
        assert store.get(memo_id).source == "memo-copy.pdf"
        assert store.sources_of(memo_id) == ["memo-copy.pdf", "sub/memo.pdf"]
        assert "sub/memo.pdf" in store.sources() and "memo-copy.pdf" in store.sources()


def test_changed_file_replaces_its_old_pages(docs: Path, tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    ingest(docs, store_dir, dpi=72)
    old_id = make_page_id(content_hash((docs / "sub" / "memo.pdf").read_bytes()), 1)
    (docs / "sub" / "memo.pdf").write_bytes(_pdf("edited memo", "with two pages"))
    report = ingest(docs, store_dir, dpi=72)
    assert len(report.added) == 2
    with PageStore.open(store_dir) as store:
        assert old_id not in store and len(store) == 7
        assert not (store_dir / "pages" / f"{old_id}.png").exists()


def test_bad_files_are_skipped_with_warnings_and_the_rest_ingested(
    docs: Path, tmp_path: Path, encrypted_pdf: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    (docs / "corrupt.pdf").write_bytes(b"%PDF-1.7\n1 0 obj << broken")
    (docs / "locked.pdf").write_bytes(encrypted_pdf)
    (docs / "garbage.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 40)
    with caplog.at_level(logging.WARNING, logger="evidra.corpus"):
        report = ingest(docs, tmp_path / "store", dpi=72)
    reasons = {f.path: f.reason for f in report.failed}
    assert set(reasons) == {"corrupt.pdf", "locked.pdf", "garbage.png"}
    assert "encrypted" in reasons["locked.pdf"]
    assert "not a readable PDF" in reasons["corrupt.pdf"]
    assert "not a readable image" in reasons["garbage.png"]
    warned = " ".join(r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    for name in ("corrupt.pdf", "locked.pdf", "garbage.png"):
        assert f"skipping {name}" in warned
    assert len(report.added) == 6
    assert not [p for p in (tmp_path / "store" / "pages").iterdir() if p.suffix != ".png"]  # no temp files


@pytest.mark.skipif(not hasattr(os, "symlink"), reason="no symlinks on this platform")
def test_symlinks_resolving_outside_the_root_are_refused(
    docs: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pdf").write_bytes(_pdf("secret"))
    (docs / "link.pdf").symlink_to(outside / "secret.pdf")
    (docs / "linkdir").symlink_to(outside, target_is_directory=True)
    (docs / "inside-link.pdf").symlink_to(docs / "report.pdf")  # stays inside: allowed
    (docs / "dangling.pdf").symlink_to(docs / "missing.pdf")
    with caplog.at_level(logging.WARNING, logger="evidra.corpus"):
        report = ingest(docs, tmp_path / "store", dpi=72)
    refused = {f.path: f.reason for f in report.failed}
    assert set(refused) == {"link.pdf", "linkdir", "dangling.pdf"}
    assert (
        "outside the ingest root" in refused["link.pdf"] and "outside the ingest root" in refused["linkdir"]
    )
    assert "broken symbolic link" in refused["dangling.pdf"]
    assert "skipping link.pdf" in caplog.text
    with PageStore.open(tmp_path / "store") as store:
        assert not [p for p in store.pages() if "secret" in p.text]
        assert "inside-link.pdf" in store.sources()


def test_failure_mid_file_leaves_nothing_of_that_file(
    docs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ingest_module._render

    def fail_on_page_2(path: Path, data: bytes, source: str, *rest: object):  # type: ignore[no-untyped-def]
        for page in real(path, data, source, *rest):
            if source == "report.pdf" and page.page_number == 2:
                raise CorpusError("report.pdf: simulated crash on page 2")
            yield page

    monkeypatch.setattr(ingest_module, "_render", fail_on_page_2)
    store_dir = tmp_path / "store"
    report = ingest(docs, store_dir, dpi=72)
    assert [f.path for f in report.failed] == ["report.pdf"]
    report_hash = content_hash((docs / "report.pdf").read_bytes())
    with PageStore.open(store_dir) as store:
        assert len(store) == 3 and "report.pdf" not in store.sources()
        assert make_page_id(report_hash, 1) not in store
    assert sorted(p.name for p in (store_dir / "pages").iterdir()) == sorted(
        f"{pid}.png" for pid in report.added
    )


def test_store_inside_root_is_not_ingested_and_single_file_root_works(docs: Path) -> None:
    report = ingest(docs, docs / "store", dpi=72)
    again = ingest(docs, docs / "store", dpi=72)
    assert len(report.added) == 6 and again.files_seen == 4 and again.added == ()
    single = ingest(docs / "sub" / "memo.pdf", docs / "store")
    assert single.files_seen == 1 and len(single.skipped) == 1


def test_ocr_hook_supplies_words_for_pages_without_a_text_layer(docs: Path, tmp_path: Path) -> None:
    def fake_ocr(image: Image.Image) -> list[Word]:
        return [Word("ocr", Box(0, 0, image.width / 2, image.height / 2))]

    ingest(docs, tmp_path / "store", dpi=72, ocr=fake_ocr)
    with PageStore.open(tmp_path / "store") as store:
        by_source = {p.source: p for p in store.pages()}
    assert [w.text for w in by_source["scan.png"].words] == ["ocr"]
    assert by_source["scan.png"].words[0].box.as_tuple() == (0, 0, 60, 40)
    assert [w.text for w in by_source["sub/memo.pdf"].words] == ["memo", "text"]  # text layer kept


def test_missing_root_and_bad_dpi_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="does not exist"):
        ingest(tmp_path / "nope", tmp_path / "store")
    (tmp_path / "d").mkdir()
    with pytest.raises(InvalidInputError, match="dpi must be positive"):
        ingest(tmp_path / "d", tmp_path / "store", dpi=0)


def test_non_recursive_ingest_skips_subfolders(docs: Path, tmp_path: Path) -> None:
    report = ingest(docs, tmp_path / "store", dpi=72, recursive=False)
    assert report.files_seen == 3 and len(report.added) == 5


def test_bm25_finds_words_set_with_ligatures_in_an_ingested_pdf(ligature_pdf: bytes, tmp_path: Path) -> None:
    from evidra.retrieval.lifecycle.index_folder import build_index

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "spec.pdf").write_bytes(ligature_pdf)
    (tmp_path / "docs" / "other.pdf").write_bytes(_pdf("memo about the budget"))
    ingest(tmp_path / "docs", tmp_path / "store", dpi=72)
    with PageStore.open(tmp_path / "store") as store:
        pages = store.pages()
        spec_page = next(p.id for p in pages if "Specification" in p.text)
        with build_index(pages, tmp_path / "bm25", "bm25") as engine:
            hits = engine.retriever.search(["specification", "floor", "fine"], k=2)
    assert [[h.page_id for h in q] for q in hits] == [[spec_page]] * 3
