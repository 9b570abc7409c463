"""A page store whose database names files outside it (a planted or damaged ``store.sqlite``)
stops an ingest in one line before any file is written or deleted, and is never read through."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import CorpusError
from evidra.corpus import ingest
from evidra.corpus.store import PageStore


def _store(tmp_path: Path) -> tuple[Path, Path]:
    docs = tmp_path / "docs"
    docs.mkdir()
    for i, colour in enumerate(("white", "gray")):
        Image.new("RGB", (40, 30), colour).save(docs / f"p{i}.png")
    ingest(docs, tmp_path / "store")
    return docs, tmp_path / "store"


def test_a_planted_page_id_never_deletes_a_file_outside_the_store(tmp_path: Path) -> None:
    docs, store = _store(tmp_path)
    victim = tmp_path / "outside" / "file.png"
    victim.parent.mkdir()
    victim.write_bytes(b"keep me")
    with sqlite3.connect(store / "store.sqlite") as conn:
        conn.execute("UPDATE pages SET id = '../../outside/file' WHERE source = 'p0.png'")
    Image.new("RGB", (40, 30), "black").save(docs / "p0.png")  # new content: the old pages go
    listing = sorted(p.name for p in (store / "pages").iterdir())
    with pytest.raises(CorpusError, match=r"store\.sqlite names '\.\./\.\./outside/file\.png'") as err:
        ingest(docs, store)
    assert "\n" not in str(err.value)
    assert victim.read_bytes() == b"keep me"
    assert sorted(p.name for p in (store / "pages").iterdir()) == listing  # nothing written either


def test_a_planted_image_path_is_never_read(tmp_path: Path) -> None:
    _, store = _store(tmp_path)
    with sqlite3.connect(store / "store.sqlite") as conn:
        conn.execute("UPDATE pages SET image_path = '/etc/hostname' WHERE source = 'p1.png'")
    with PageStore.open(store) as opened, pytest.raises(CorpusError, match="'/etc/hostname', which is not"):
        opened.pages()
