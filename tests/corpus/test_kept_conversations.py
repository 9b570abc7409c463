"""Conversations in a page store's SQLite file: an old store gains the tables without loss, a
newer layout is refused, and every record read back is checked and capped."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.corpus.conversations import MAX_RECORD_BYTES, Cited, Conversations, Turn, checked_id
from evidra.corpus.store import DB_NAME, PageStore


def _turn(question: str = "When was Orion founded?") -> Turn:
    cited = (Cited(1, "founded in 1894", "p1", (10.0, 20.0, 110.0, 40.0), (0.0, 18.0, 400.0, 42.0)),)
    return Turn("a" * 32, 0.0, question, "1894", False, "<answer>1894</answer>", (), "stop", cited, ("p1",))


def _tables(root: Path) -> set[str]:
    with sqlite3.connect(root / DB_NAME) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_an_old_store_gains_the_tables_and_keeps_its_pages(tmp_path: Path) -> None:
    PageStore.create(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as conn:  # a page of a store written before conversations
        conn.execute("INSERT INTO pages VALUES ('p1', 'x.png', 10, 10, 'a.pdf', 1, 150, 'h')")
    assert "conversations" not in _tables(tmp_path)
    kept = Conversations(tmp_path)
    cid = kept.add(None, _turn())
    kept.close()
    assert {"conversations", "turns", "pages"} <= _tables(tmp_path)
    with PageStore.open(tmp_path) as store:
        assert store.page_ids() == ["p1"]
    again = Conversations(tmp_path)  # reopened: the same answer, field for field
    (summary,) = again.summaries()
    got = again.get(cid)
    again.close()
    assert (summary.title, summary.turns) == ("When was Orion founded?", 1)
    assert got.turns[0].cited == _turn().cited and got.turns[0].answer == "1894"


def test_a_newer_layout_is_refused_in_one_line(tmp_path: Path) -> None:
    PageStore.create(tmp_path).close()
    Conversations(tmp_path).close()
    with sqlite3.connect(tmp_path / DB_NAME) as conn:
        conn.execute("UPDATE meta SET value = '9' WHERE key = 'conversations_version'")
    with pytest.raises(CorpusError, match="layout '9', this evidra reads 1"):
        Conversations(tmp_path)


def _planted(root: Path, records: list[str]) -> str:
    kept = Conversations(root)
    cid = kept.add(None, _turn())
    kept.close()
    with sqlite3.connect(root / DB_NAME) as conn:
        for i, record in enumerate(records, 1):
            conn.execute("INSERT INTO turns VALUES (?, ?, ?, 0, ?)", (cid, i, f"{i:032x}", record))
    return cid


def test_hostile_records_are_capped_checked_or_left_out(tmp_path: Path) -> None:
    PageStore.create(tmp_path).close()
    good = json.loads(json.dumps({**_turn().__dict__, "cited": [c.__dict__ for c in _turn().cited]}))
    del good["id"], good["created"]
    long = {**good, "question": "Q" * 50_000, "output": "o" * 200_000}
    bad_boxes = {
        **good,
        "cited": [
            {"step": 1, "text": "x", "page_id": "p1", "box": ["1", 2, 3, 4], "crop": [0, 0, float("inf"), 1]}
        ],
    }
    records = [
        json.dumps(long),
        json.dumps(bad_boxes).replace("Infinity", "1e400"),
        "{not json",
        json.dumps({**good, "cited": "nope"}),
        json.dumps({**good, "padding": "x" * (MAX_RECORD_BYTES + 1)}),
        json.dumps([1, 2]),
    ]
    cid = _planted(tmp_path, records)
    kept = Conversations(tmp_path)
    turns = kept.get(cid).turns
    kept.close()
    assert len(turns) == 3  # the first, the long one and the one with bad boxes; four left out
    assert len(turns[1].question) == 4000 and len(turns[1].output) == 100_000
    assert turns[2].cited[0].box is None and turns[2].cited[0].crop is None


def test_ids_are_checked_before_any_query() -> None:
    assert checked_id("0" * 32) == "0" * 32
    for bad in ("../x", "0" * 31, "G" * 32, None, 5):
        with pytest.raises(InvalidInputError, match="is not 32 hex digits"):
            checked_id(bad)
