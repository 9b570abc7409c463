"""Documents carry a title and user metadata (--meta, sidecar JSON); --where filters pages by them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.core.errors import InvalidInputError
from evidra.corpus import PageStore, ingest
from evidra.corpus.metadata import parse_meta, parse_where
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf


def _pdf(path: Path, lines: list[str]) -> None:
    pages = []
    for line in lines:
        c = PdfCanvas(300, 200)
        c.text(20, 50, line, 12)
        pages.append(c)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(write_pdf(pages))


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    _pdf(tmp_path / "docs" / "report.pdf", ["Revenue grew in 2024", "Orion was founded in 1987"])
    _pdf(tmp_path / "docs" / "sub" / "memo.pdf", ["Orion hired a new director"])
    (tmp_path / "docs" / "sub" / "memo.pdf.meta.json").write_text(json.dumps({"year": 2023, "draft": True}))
    return tmp_path / "docs"


def test_ingest_records_titles_meta_and_sidecars(docs: Path, tmp_path: Path) -> None:
    ingest(docs, tmp_path / "store", meta={"year": "2024", "team": "finance"})
    with PageStore.open(tmp_path / "store") as store:
        metas = store.page_meta()
    by_file = {(m.file, m.page_number): m for m in metas.values()}
    report, memo = by_file["report.pdf", 2], by_file["memo.pdf", 1]
    assert report.title == "report" and report.meta == {"year": "2024", "team": "finance"}
    assert memo.meta == {"year": "2023", "team": "finance", "draft": "true"}  # the sidecar wins
    assert report.doc_id == report.page_id.rsplit("-p", 1)[0] and report.citation == "report.pdf p. 2"
    assert memo.source == "sub/memo.pdf"


def test_where_keeps_alternatives_of_one_key_and_all_keys(docs: Path, tmp_path: Path) -> None:
    ingest(docs, tmp_path / "store", meta={"year": "2024"})
    with PageStore.open(tmp_path / "store") as store:
        metas = store.page_meta()

        def files(*items: str) -> list[tuple[str, int]]:
            return [(metas[p].file, metas[p].page_number) for p in store.page_ids_where(parse_where(items))]

        assert files("file=report.pdf") == [("report.pdf", 1), ("report.pdf", 2)]
        assert files("file=sub/memo.pdf") == [("memo.pdf", 1)]
        assert files("file=report.pdf", "file=memo.pdf", "page=1") == [("report.pdf", 1), ("memo.pdf", 1)]
        assert files("year=2023") == [("memo.pdf", 1)] and files("year=1999") == []
        assert files("title=report", "page=2") == [("report.pdf", 2)]


def test_bad_metadata_and_filters_are_one_line_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="KEY=VALUE"):
        parse_where(["file"])
    with pytest.raises(InvalidInputError, match="--meta takes KEY=VALUE"):
        parse_meta(["year"])
    with pytest.raises(InvalidInputError, match="not one of file, doc, page, title"):
        parse_meta(["page=3"])
    _pdf(tmp_path / "d" / "a.pdf", ["text"])
    (tmp_path / "d" / "a.pdf.meta.json").write_text('{"nested": {"no": 1}}')
    report = ingest(tmp_path / "d", tmp_path / "store")
    assert [f.path for f in report.failed] == ["a.pdf"] and "a.pdf.meta.json" in report.failed[0].reason


def test_a_store_written_before_documents_opens_and_titles_by_file_name(docs: Path, tmp_path: Path) -> None:
    ingest(docs, tmp_path / "store")
    with sqlite3.connect(tmp_path / "store" / "store.sqlite") as conn:
        conn.execute("DROP TABLE documents")  # what an older evidra wrote
    with PageStore.open(tmp_path / "store") as store:
        assert {m.title for m in store.page_meta().values()} == {"report", "memo"}
        assert all(not m.meta for m in store.page_meta().values())


def test_cli_ingest_meta_then_index_search_where(
    docs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, idx = str(tmp_path / "store"), str(tmp_path / "idx")
    assert main(["ingest", str(docs), "--store", store, "--meta", "year=2024", "-q"]) == 0
    assert main(["-q", "index", "build", "--store", store, "--out", idx, "--encoder", "bm25"]) == 0
    capsys.readouterr()
    assert main(["index", "search", "--index", idx, "--json", "Orion"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert {(h["file"], h["page_number"]) for h in hits} == {("report.pdf", 2), ("memo.pdf", 1)}
    assert all(h["doc_id"] and h["cite"] and "title" in h for h in hits)
    assert main(["index", "search", "--index", idx, "--where", "year=2023", "--json", "Orion"]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert [(h["file"], h["meta"]) for h in hits] == [("memo.pdf", {"year": "2023", "draft": "true"})]
    assert main(["index", "search", "--index", idx, "--where", "file=report.pdf", "Orion founded"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1].split()[2:4] == ["report.pdf", "p."] and len(out) == 2
    assert main(["index", "search", "--index", idx, "--where", "file=nothing.pdf", "Orion"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evidra index search: error: no page of store") and "\n" not in err
    assert main(["index", "search", "--index", idx, "capital of Mongolia"]) == 0
    assert "no relevant page" in capsys.readouterr().out
