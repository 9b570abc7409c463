"""An index attached to a page store: registration in the store, and the newest one that exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.corpus import PageStore
from evidra.retrieval.lifecycle.attach import is_url, registered_index


def test_registered_indexes_newest_first_without_duplicates(tmp_path: Path) -> None:
    with PageStore.create(tmp_path / "store") as store:
        assert store.indexes() == [] and registered_index(store) is None
        for name in ("a", "b", "a"):  # registering "a" again makes it the newest, once
            (tmp_path / name).mkdir(exist_ok=True)
            store.register_index(tmp_path / name)
        assert store.indexes() == [str(tmp_path / "a"), str(tmp_path / "b")]
    with PageStore.open(tmp_path / "store") as store:  # kept in the store's database
        assert registered_index(store) == str(tmp_path / "a")


def test_a_registered_index_that_is_gone_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with PageStore.create(tmp_path / "store") as store:
        (tmp_path / "old").mkdir()
        store.register_index(tmp_path / "old")
        store.register_index(tmp_path / "removed")
        assert registered_index(store) == str(tmp_path / "old")
        assert "no longer exists" in caplog.text and str(tmp_path / "removed") in caplog.text
        store._conn.execute("UPDATE meta SET value = '{oops' WHERE key = 'indexes'")
        assert store.indexes() == []  # a damaged list is forgotten, not fatal


def test_urls_are_told_from_directories() -> None:
    assert is_url("http://127.0.0.1:8000") and is_url("https://search.example")
    assert not is_url("idx/") and not is_url("httpdocs/idx")


def test_two_indexes_are_fused_as_asked_and_weights_are_checked_first(tmp_path: Path) -> None:
    from evidra.core.errors import InvalidInputError
    from evidra.corpus import ingest
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
    from evidra.retrieval.encoders.bm25 import BM25Params
    from evidra.retrieval.hybrid import DEFAULT_FUSION, Fusion, HybridRetriever
    from evidra.retrieval.lifecycle.attach import attach
    from evidra.retrieval.lifecycle.index_folder import build_index

    canvases = []
    for text in ("orion budget report", "whale migration notes", "orion whale census"):
        canvases.append(PdfCanvas(300, 200))
        canvases[-1].text(30, 50, text, 14)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.pdf").write_bytes(write_pdf(canvases))
    ingest(tmp_path / "docs", tmp_path / "store", dpi=36)
    with PageStore.open(tmp_path / "store") as store:
        pages = store.pages()
        for name, params in (("stop", BM25Params()), ("plain", BM25Params(language="none"))):
            build_index(pages, tmp_path / name, "bm25", bm25=params).close()
        where = [str(tmp_path / "stop"), str(tmp_path / "plain")]
        with pytest.raises(InvalidInputError, match="got 1 fusion weights for 2 indexes"):
            attach([str(tmp_path / "nowhere"), where[0]], store, fusion=Fusion(weights=(1.0,)))
        plain = attach(where, store)
        rrf = attach(where, store, fusion=Fusion("rrf", rrf_k=0, weights=(1.0, 2.0)))
        try:
            assert isinstance(plain.retriever, HybridRetriever) and plain.retriever.fusion == DEFAULT_FUSION
            hits = rrf.search("orion whale", k=3)
            # both indexes rank the census page (both words) first: 1/1 + 2/1 = 3
            assert hits[0].page_id == pages[2].id and hits[0].score == pytest.approx(3.0)
        finally:
            plain.close()
            rrf.close()
