"""An index attached to a page store: registration in the store, and the newest one that exists."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidra.corpus import PageStore
from evidra.retrieval.attach import is_url, registered_index


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
