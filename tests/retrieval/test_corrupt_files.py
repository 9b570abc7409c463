"""Damaged stores, indexes and page images: each gives one line naming the file and the fix
(through the CLI: exit code 2, no traceback), never a raw exception or a silent empty result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from evidra.cli.main import main


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, tiny_dirs: dict[str, Path]) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("corrupt")
    docs = root / "docs"
    docs.mkdir()
    for i, colour in enumerate(("white", "gray", "black")):
        Image.new("RGB", (120, 160), colour).save(docs / f"p{i}.png")
    store, visual = root / "store", root / "visual"
    assert main(["-q", "ingest", str(docs), "--store", str(store)]) == 0
    colq = ["--encoder", "colqwen2", "--model", str(tiny_dirs["colqwen2"])]
    assert main(["-q", "index", "build", "--store", str(store), *colq, "--out", str(visual)]) == 0
    return {"root": root, "store": store, "visual": visual, "colqwen2": tiny_dirs["colqwen2"]}


def _one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str], *needles: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]
    assert "Traceback" not in err and len(lines) == 1, err
    for needle in needles:
        assert needle in err, err


def test_damaged_index_database(
    built: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for name, damage in (
        ("random", lambda p: p.write_bytes(b"\xa5" * 300)),
        ("empty", lambda p: p.write_bytes(b"")),
    ):
        index = tmp_path / name
        shutil.copytree(built["visual"], index)
        damage(index / "index.sqlite")
        _one_line_error(
            capsys, ["index", "search", "--index", str(index), "revenue"], "index.sqlite", "rebuild"
        )


def test_damaged_store_database(
    built: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    shutil.copytree(built["store"], store)
    (store / "store.sqlite").write_bytes(b"")  # an empty file is not an empty store
    argv = ["index", "build", "--store", str(store), "--encoder", "bm25", "--out", str(tmp_path / "i")]
    _one_line_error(capsys, argv, "store.sqlite", "0 bytes")
    (store / "store.sqlite").write_bytes(b"\x00garbage" * 40)
    _one_line_error(capsys, argv, "store.sqlite", "not a readable page store")


def test_a_store_without_pages_is_not_indexed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evidra.corpus.store import PageStore

    PageStore.create(tmp_path / "empty").close()
    argv = [
        "index",
        "build",
        "--store",
        str(tmp_path / "empty"),
        "--encoder",
        "bm25",
        "--out",
        str(tmp_path / "i"),
    ]
    _one_line_error(capsys, argv, "holds no pages", "evidra ingest")


def test_truncated_page_image_in_index_build(
    built: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    shutil.copytree(built["store"], store)
    page = sorted((store / "pages").glob("*.png"))[0]
    page.write_bytes(page.read_bytes()[:60])
    colq = ["--encoder", "colqwen2", "--model", str(built["colqwen2"])]
    argv = ["index", "build", "--store", str(store), *colq, "--out", str(tmp_path / "i")]
    _one_line_error(capsys, argv, page.name, "cannot be read", "ingest its document again")


def test_damaged_or_old_bm25_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evidra.core.types import Box, Page, Word
    from evidra.retrieval.lifecycle.index_folder import build_index

    pages = [Page("p1", "/pages/1.png", 10, 10, words=(Word("revenue", Box(0, 0, 5, 5)),))]
    build_index(pages, tmp_path / "bm25", "bm25").close()
    index = tmp_path / "bm25"
    search = ["index", "search", "--index", str(index), "revenue"]
    assert main(search) == 0
    data = index / json.loads((index / "retriever.json").read_text())["data_dir"]  # the live BM25 folder
    (next(data.glob("bm25-*")) / "pages.json").write_text('{"ids": ["p1"')  # cut short
    _one_line_error(capsys, search, "cannot read the BM25 index", "pages.json", "evidra index build")
    shutil.rmtree(next(data.glob("bm25-*")))
    (data / "bm25.index.json").unlink()
    (data / "bm25.json").write_text('{"k1": 1.5, "b": 0.75, "ids": ["p1"], "images": [""], "docs": [{}]}')
    _one_line_error(capsys, search, "older evidra (bm25.json)", "--encoder bm25")
