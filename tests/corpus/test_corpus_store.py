"""PageStore: opening, lookups with helpful errors, schema versioning, round trips."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.core.types import Box, Word
from evidra.corpus import PageStore, ingest
from evidra.corpus.pdf import RenderedPage
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf


def test_open_missing_store_says_how_to_make_one(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="evidra ingest"):
        PageStore.open(tmp_path / "nowhere")


def test_create_is_open_or_create(tmp_path: Path) -> None:
    with PageStore.create(tmp_path / "s") as store:
        assert len(store) == 0 and store.pages() == [] and store.sources() == []
        store.write_file("a.png", "h1", [("h1-p0001", RenderedPage(1, Image.new("RGB", (4, 3)), ()))], None)
    with PageStore.create(tmp_path / "s") as again:  # existing store: opened, not wiped
        assert again.page_ids() == ["h1-p0001"]


def test_create_refuses_a_file_path(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(CorpusError, match="not a directory"):
        PageStore.create(tmp_path / "f")


def test_unknown_page_id_suggests_close_ids(tmp_path: Path) -> None:
    with PageStore.create(tmp_path / "s") as store:
        store.write_file("a.png", "abc", [("abc-p0001", RenderedPage(1, Image.new("RGB", (4, 3)), ()))], None)
        with pytest.raises(InvalidInputError, match=r"unknown page id 'abc-p0002'.*did you mean 'abc-p0001'"):
            store.get("abc-p0002")
        with pytest.raises(InvalidInputError, match="unknown page id"):
            store.sources_of("zzz")


def test_schema_version_mismatch_is_reported(tmp_path: Path) -> None:
    PageStore.create(tmp_path / "s").close()
    with sqlite3.connect(tmp_path / "s" / "store.sqlite") as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(CorpusError, match="schema version 99"):
        PageStore.open(tmp_path / "s")


def test_garbage_database_is_reported(tmp_path: Path) -> None:
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "store.sqlite").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(CorpusError, match="not a readable page store"):
        PageStore.open(tmp_path / "s")


def test_words_round_trip_exactly(tmp_path: Path) -> None:
    words = (Word("alpha", Box(1.5, 2.25, 10.0, 8.0)), Word("beta", Box(12.0, 2.0, 20.5, 8.75)))
    with PageStore.create(tmp_path / "s") as store:
        store.write_file("d.pdf", "h", [("h-p0001", RenderedPage(1, Image.new("RGB", (30, 10)), words))], 144)
    with PageStore.open(tmp_path / "s") as store:
        page = store.get("h-p0001")
        assert page.words == words and page.dpi == 144 and page.size == (30, 10)
        assert store.get("h-p0001", with_words=False).words == ()


def test_reopened_store_returns_equal_pages(tmp_path: Path) -> None:
    docs = tmp_path / "docs"
    docs.mkdir()
    canvas = PdfCanvas(200, 100)
    canvas.text(10, 40, "reopen me", 12)
    (docs / "a.pdf").write_bytes(write_pdf([canvas, canvas]))
    Image.new("RGB", (10, 10), "white").save(docs / "b.png")
    ingest(docs, tmp_path / "s", dpi=72)
    with PageStore.open(tmp_path / "s") as first:
        pages = first.pages()
        ids = first.page_ids()
    with PageStore.open(tmp_path / "s") as second:
        assert second.pages() == pages
        assert [second.get(pid) for pid in ids] == pages
        assert ids == [p.id for p in pages] and len(second) == 3
        assert repr(second).endswith("pages=3)")
    assert pages[0].words[0] == Word("reopen", pages[0].words[0].box)
