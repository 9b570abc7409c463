"""A synthetic corpus cached as JSON: a cache file in a shared folder can hold no code.

>>> from evidra.data.synth.documents import SynthCorpus
>>> corpus_from_json(corpus_to_json(SynthCorpus("/tmp/c", 72.0, (), ()))).dpi
72.0
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TypeVar, get_args

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.core.jsonvalue import JSON, json_kind, need_float, need_object
from evidra.core.types import Box, CoordSpace, Word
from evidra.data.synth.documents import Kind, SynthCorpus, SynthDocument, SynthQuestion
from evidra.safeio.jsonfiles import MAX_FILE_BYTES, read_capped_text

logger = logging.getLogger(__name__)
T = TypeVar("T")
_KINDS: tuple[Kind, ...] = get_args(Kind)


def corpus_to_json(corpus: SynthCorpus) -> str:
    """The corpus as JSON (boxes as ``[x1, y1, x2, y2, space]``): a cache nothing can execute."""

    questions = [
        {
            **{f: getattr(q, f) for f in _QUESTION_FIELDS},
            "gold_box": None if q.gold_box is None else box_to_json(q.gold_box),
            "evidence_box": None if q.evidence_box is None else box_to_json(q.evidence_box),
        }
        for q in corpus.questions
    ]
    documents = [_document_json(d) for d in corpus.documents]
    return json.dumps(
        {"root": corpus.root, "dpi": corpus.dpi, "documents": documents, "questions": questions}
    )


def words_to_json(words: Sequence[Word]) -> list[list[str | float]]:
    """A page's text layer as ``[text, x1, y1, x2, y2]`` rows (page pixels).

    >>> words_from_json(words_to_json([Word("Orion", Box(1.0, 2.0, 30.0, 12.0))]))[0].text
    'Orion'
    """
    return [[w.text, w.box.x1, w.box.y1, w.box.x2, w.box.y2] for w in words]


def words_from_json(rows: JSON) -> tuple[Word, ...]:
    """Inverse of :func:`words_to_json` (``ValueError``/``TypeError`` on anything else)."""
    return tuple(_word(row) for row in _list(rows, "a page's words"))


def _word(row: JSON) -> Word:
    text, *coords = _list(row, "a word")
    if len(coords) != 4:
        raise ValueError(f"a word has {len(coords) + 1} values, not [text, x1, y1, x2, y2]")
    x1, y1, x2, y2 = (need_float(v, "a word's coordinate") for v in coords)
    return Word(str(text), Box(x1, y1, x2, y2))


def _list(value: JSON, what: str) -> list[JSON]:
    if not isinstance(value, list):
        raise TypeError(f"{what} is {json_kind(value)}, not a list")
    return value


def _document_json(d: SynthDocument) -> dict[str, object]:
    words = [words_to_json(page) for page in d.page_words]
    return {**dataclasses.asdict(replace(d, page_words=())), "page_words": words}


_QUESTION_FIELDS = (
    "id",
    "question",
    "answers",
    "kind",
    "doc_id",
    "source",
    "page_number",
    "page_id",
    "evidence_text",
    "answerable",
)


def corpus_from_json(text: str) -> SynthCorpus:
    """Inverse of :func:`corpus_to_json`; raises ``InvalidInputError`` for anything else."""
    try:
        data = json.loads(text)
        documents = tuple(
            SynthDocument(
                d["id"],
                d["source"],
                tuple(d["page_ids"]),
                tuple(d["image_paths"]),
                tuple((int(w), int(h)) for w, h in d["page_sizes"]),
                # a cache written before the words were kept has none
                tuple(words_from_json(page) for page in d.get("page_words", [])),
            )
            for d in data["documents"]
        )
        questions = tuple(_question(q) for q in data["questions"])
        return SynthCorpus(str(data["root"]), float(data["dpi"]), documents, questions)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError) as exc:
        raise InvalidInputError(f"not a synthetic corpus cache ({type(exc).__name__}: {exc})") from exc


def _question(value: JSON) -> SynthQuestion:
    q = need_object(value, "a question")
    answers = _list(q["answers"], "answers")
    if not all(isinstance(a, str) for a in answers):
        raise TypeError("answers must be a list of text")
    if not isinstance(q["answerable"], bool):
        raise TypeError(f"answerable is {json_kind(q['answerable'])}, not true or false")
    return SynthQuestion(
        id=_text(q["id"], "id"),
        question=_text(q["question"], "question"),
        answers=tuple(str(a) for a in answers),
        kind=_kind(q["kind"]),
        doc_id=_text(q["doc_id"], "doc_id"),
        source=_text(q["source"], "source"),
        page_number=_optional_int(q["page_number"], "page_number"),
        page_id=None if q["page_id"] is None else _text(q["page_id"], "page_id"),
        gold_box=_box(q["gold_box"]),
        evidence_box=_box(q["evidence_box"]),
        evidence_text=_text(q["evidence_text"], "evidence_text"),
        answerable=q["answerable"],
    )


def _text(value: JSON, what: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{what} is {json_kind(value)}, not text")
    return value


def _optional_int(value: JSON, what: str) -> int | None:
    if value is not None and not isinstance(value, int):
        raise TypeError(f"{what} is {json_kind(value)}, not an integer")
    return value


def _kind(value: JSON) -> Kind:
    for kind in _KINDS:
        if value == kind:
            return kind
    raise ValueError(f"kind {value!r} is none of {_KINDS}")


def _box(value: JSON) -> Box | None:
    return None if value is None else box_from_json(value)


def box_to_json(b: Box) -> list[float | str]:
    """A box as the caches store it: ``[x1, y1, x2, y2, space]``."""
    return [b.x1, b.y1, b.x2, b.y2, b.space.value]


def box_from_json(v: JSON) -> Box:
    """The box ``box_to_json`` wrote, or a ``TypeError``/``ValueError`` naming what is wrong."""
    if not isinstance(v, list) or len(v) != 5 or not isinstance(v[4], str):
        raise TypeError(f"a box is {json_kind(v)}, not [x1, y1, x2, y2, space]")
    x1, y1, x2, y2 = (need_float(c, "a box coordinate") for c in v[:4])
    return Box(x1, y1, x2, y2, CoordSpace(v[4]))


def build_once(
    cache: Path,
    build: Callable[[], T],
    dump: Callable[[T], str],
    load: Callable[[str], T],
    what: str = "cache",
) -> T:
    """``load`` of the JSON file ``cache``, or ``build()`` written there (atomically) when it is
    missing or does not parse; one process at a time per folder (a file lock), so the ranks of a
    distributed run and repeated runs share one draw instead of racing to write it."""
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cache.exists():
            try:
                return load(read_capped_text(cache, what, MAX_FILE_BYTES))
            except (EvidraError, OSError, ValueError, KeyError, TypeError) as exc:
                logger.warning("rebuilding the unreadable %s %s (%s)", what, cache, exc)
        result = build()
        tmp = cache.with_name(cache.name + ".tmp")
        tmp.write_text(dump(result), encoding="utf-8")
        os.replace(tmp, cache)
        return result
