"""Conversations kept in a page store's SQLite file: each question, its answer and the page + box
of every cited step, so that an app re-renders them after a reload or a restart.

Two tables beside the pages (``evidra.corpus.store``)::

    conversations(id, title, created, updated)
    turns(conversation_id, idx, id, created, record)   record: one turn as JSON (``Turn``)

They are added when a store is opened here, so a store written before them gains them empty and
loses nothing; ``meta.conversations_version`` records the layout (``VERSION``), and a store whose
layout is newer than this evidra's is refused with one line rather than misread. Every record is
read back as hostile input: a record over ``MAX_RECORD_BYTES`` is not even loaded, every field is
type-checked and capped (``MAX_*``), and a record that fails is skipped with a warning, its
conversation still shown. Page ids are kept, never page labels: a reader names the pages from
the store itself.
"""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from evidra.core.errors import CorpusError, InvalidInputError

logger = logging.getLogger(__name__)

VERSION = 1
MAX_RECORD_BYTES = 1 << 20  # one turn as JSON
MAX_TEXT = 4000  # characters of a question, a step's text, a title
MAX_ANSWER = 20_000  # characters of an answer
MAX_OUTPUT = 100_000  # characters of the model's raw output
MAX_ITEMS = 64  # citations, pages or format errors of one turn
MAX_TURNS = 200  # turns of one conversation (a longer one is refused a new turn)
MAX_LISTED = 500  # conversations listed, newest first
MAX_COORD = 1e7  # a box coordinate (page pixels) beyond this is no box
ID = re.compile(r"[0-9a-f]{32}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id TEXT PRIMARY KEY, title TEXT NOT NULL, created REAL NOT NULL, updated REAL NOT NULL);
CREATE TABLE IF NOT EXISTS turns (
    conversation_id TEXT NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    idx INTEGER NOT NULL, id TEXT NOT NULL UNIQUE, created REAL NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (conversation_id, idx));
"""

Coords = tuple[float, float, float, float]


@dataclass(frozen=True)
class Cited:
    """One cited step: its number (0: the answer's own citation), text, page id and boxes."""

    step: int
    text: str
    page_id: str | None
    box: Coords | None  # page pixels
    crop: Coords | None  # the box grown to whole lines (``evidra.app.crops``)


@dataclass(frozen=True)
class Turn:
    """One question and its answer, as stored."""

    id: str
    created: float
    question: str
    answer: str | None  # None: the model's output held no readable answer
    no_hits: bool  # no page matched: no model was asked
    output: str
    errors: tuple[str, ...]
    finish_reason: str
    cited: tuple[Cited, ...]
    page_ids: tuple[str, ...]  # the pages the model read, in order


@dataclass(frozen=True)
class Summary:
    id: str
    title: str
    created: float
    updated: float
    turns: int


@dataclass(frozen=True)
class Conversation:
    id: str
    title: str
    created: float
    updated: float
    turns: tuple[Turn, ...]


def new_id() -> str:
    return uuid.uuid4().hex


def checked_id(value: object, what: str = "conversation") -> str:
    """``value`` if it is an id this module writes (32 hex digits), else ``InvalidInputError``."""
    if not isinstance(value, str) or not ID.fullmatch(value):
        raise InvalidInputError(f"{what} id {str(value)[:40]!r} is not 32 hex digits; take one from the list")
    return value


class Conversations:
    """The conversations of the page store at ``root`` (its own connection: one thread at a time)."""

    def __init__(self, root: str | Path) -> None:
        from evidra.corpus.store import DB_NAME

        path = Path(root) / DB_NAME
        self._conn = sqlite3.connect(path)
        try:
            self._conn.execute("PRAGMA foreign_keys = ON")
            self._conn.executescript(_SCHEMA)
            self._check_version(path)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise CorpusError(f"{path} cannot hold conversations ({exc})") from exc
        except CorpusError:
            self._conn.close()
            raise

    def _check_version(self, path: Path) -> None:
        row = self._conn.execute("SELECT value FROM meta WHERE key = 'conversations_version'").fetchone()
        if row is None:
            with self._conn:
                self._conn.execute("INSERT INTO meta VALUES ('conversations_version', ?)", (str(VERSION),))
        elif str(row[0]) != str(VERSION):
            raise CorpusError(
                f"{path} keeps conversations in layout {str(row[0])[:20]!r}, this evidra reads {VERSION}; "
                "open it with the evidra that wrote it"
            )

    def close(self) -> None:
        self._conn.close()

    def summaries(self) -> list[Summary]:
        rows = self._conn.execute(
            "SELECT c.id, c.title, c.created, c.updated, (SELECT count(*) FROM turns t "
            "WHERE t.conversation_id = c.id) FROM conversations c ORDER BY c.updated DESC LIMIT ?",
            (MAX_LISTED,),
        ).fetchall()
        return [s for s in (_summary(row) for row in rows) if s is not None]

    def get(self, conversation_id: str) -> Conversation:
        row = self._conn.execute(
            "SELECT id, title, created, updated, 0 FROM conversations WHERE id = ?", (conversation_id,)
        ).fetchone()
        head = _summary(row) if row is not None else None
        if head is None:
            raise KeyError(conversation_id)
        records = self._conn.execute(
            "SELECT id, created, CASE WHEN length(record) <= ? THEN record END FROM turns "
            "WHERE conversation_id = ? ORDER BY idx LIMIT ?",
            (MAX_RECORD_BYTES, conversation_id, MAX_TURNS),
        ).fetchall()
        turns = [t for t in (_turn(*r) for r in records) if t is not None]
        return Conversation(head.id, head.title, head.created, head.updated, tuple(turns))

    def add(self, conversation_id: str | None, turn: Turn) -> str:
        """Store ``turn`` at the end of the conversation (a new one, titled by its question, when
        ``conversation_id`` is None); its id. ``KeyError`` for an id that is not there."""
        now = time.time()
        record = json.dumps(_record(turn), ensure_ascii=False)
        if len(record.encode()) > MAX_RECORD_BYTES:
            raise InvalidInputError(f"this answer is over {MAX_RECORD_BYTES} bytes as JSON; it is not kept")
        with self._conn:
            if conversation_id is None:
                conversation_id = new_id()
                self._conn.execute(
                    "INSERT INTO conversations VALUES (?, ?, ?, ?)",
                    (conversation_id, turn.question[:120], now, now),
                )
            elif (
                self._conn.execute(
                    "UPDATE conversations SET updated = ? WHERE id = ?", (now, conversation_id)
                ).rowcount
                == 0
            ):
                raise KeyError(conversation_id)
            count = self._conn.execute(
                "SELECT count(*), coalesce(max(idx), -1) FROM turns WHERE conversation_id = ?",
                (conversation_id,),
            ).fetchone()
            if count[0] >= MAX_TURNS:
                raise InvalidInputError(
                    f"this conversation has {MAX_TURNS} turns, the most kept; start a new one"
                )
            self._conn.execute(
                "INSERT INTO turns VALUES (?, ?, ?, ?, ?)",
                (conversation_id, count[1] + 1, turn.id, now, record),
            )
        return conversation_id

    def delete(self, conversation_id: str) -> bool:
        """Remove the conversation and its turns; whether it was there."""
        with self._conn:
            self._conn.execute("DELETE FROM turns WHERE conversation_id = ?", (conversation_id,))
            return (
                self._conn.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,)).rowcount > 0
            )


def _record(turn: Turn) -> dict[str, object]:
    out = asdict(turn)
    del out["id"], out["created"]
    return out


def _text(value: object, cap: int) -> str:
    if not isinstance(value, str):
        raise ValueError("not text")
    return value[:cap]


def _coords(value: object) -> Coords | None:
    """Four finite numbers within ``MAX_COORD`` with x1 <= x2, y1 <= y2; None for anything else."""
    if not isinstance(value, list | tuple) or len(value) != 4:
        return None
    if not all(isinstance(c, int | float) and not isinstance(c, bool) for c in value):
        return None
    x1, y1, x2, y2 = (float(c) for c in value)
    if not all(math.isfinite(c) and abs(c) <= MAX_COORD for c in (x1, y1, x2, y2)) or x2 < x1 or y2 < y1:
        return None
    return (x1, y1, x2, y2)


def _cited(value: object) -> Cited:
    if not isinstance(value, dict):
        raise ValueError("a citation is not an object")
    step = value.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or not 0 <= step <= 10_000:
        raise ValueError("a citation has no step number")
    page_id = value.get("page_id")
    return Cited(
        step,
        _text(value.get("text", ""), MAX_TEXT),
        _text(page_id, 200) if page_id is not None else None,
        _coords(value.get("box")),
        _coords(value.get("crop")),
    )


def _turn(turn_id: object, created: object, record: object) -> Turn | None:
    """The stored turn, or None (with a warning) when its record is too large or malformed."""
    try:
        if not isinstance(record, str):
            raise ValueError(f"over {MAX_RECORD_BYTES} bytes or not text")
        data = json.loads(record)
        if not isinstance(data, dict):
            raise ValueError("not an object")
        answer = data.get("answer")
        items = (data.get("errors"), data.get("cited"), data.get("page_ids"))
        if not all(isinstance(i, list) for i in items):
            raise ValueError("errors, cited or page_ids is not a list")
        return Turn(
            _text(turn_id, 40),
            float(created) if isinstance(created, int | float) else 0.0,
            _text(data.get("question"), MAX_TEXT),
            _text(answer, MAX_ANSWER) if answer is not None else None,
            data.get("no_hits") is True,
            _text(data.get("output", ""), MAX_OUTPUT),
            tuple(_text(e, 500) for e in data["errors"][:MAX_ITEMS]),
            _text(data.get("finish_reason", ""), 40),
            tuple(_cited(c) for c in data["cited"][:MAX_ITEMS]),
            tuple(_text(p, 200) for p in data["page_ids"][:MAX_ITEMS]),
        )
    except (ValueError, RecursionError) as exc:
        logger.warning(
            "a stored answer (turn %s) cannot be read (%s); it is left out", str(turn_id)[:40], exc
        )
        return None


def _summary(row: tuple[object, ...]) -> Summary | None:
    cid, title, created, updated, turns = row
    if not (isinstance(cid, str) and ID.fullmatch(cid) and isinstance(title, str)):
        return None
    num = (int, float)
    return Summary(
        cid,
        title[:120],
        float(created) if isinstance(created, num) else 0.0,
        float(updated) if isinstance(updated, num) else 0.0,
        turns if isinstance(turns, int) else 0,  # count(*): always an integer
    )
