"""Reading the JSON and JSON Lines files a user passes: every failure is one line naming the file.

A path that cannot be read (missing, a folder, no permission), bytes that are not UTF-8, a line
that is not JSON, JSON nested deeper than the parser can follow, and a line or file over its
size cap all end in an ``EvidraError`` (``InvalidInputError`` unless the caller names another
subclass) that says which file, which line and what to pass instead; never a traceback.

    for n, row in read_json_lines("val.jsonl", "--data"):
        ...
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from evidra.errors import EvidraError, InvalidInputError

MAX_LINE_BYTES = 256 << 20  # one JSONL record (a benchmark row may carry base64 page images)
MAX_FILE_BYTES = 1 << 30  # one JSON document read whole


def _size(n: int) -> str:
    return f"{n >> 30} GiB" if n >= 1 << 30 else f"{n >> 20} MiB"


def parse_json(data: str | bytes, where: str, error: type[EvidraError] = InvalidInputError) -> Any:
    """``data`` decoded as UTF-8 JSON; ``where`` names it in the error ("--data 'a.jsonl' line 3").

    >>> parse_json('{"a": [1]}', "x")
    {'a': [1]}
    >>> parse_json(b"\\xff", "x.jsonl line 1")
    Traceback (most recent call last):
    evidra.errors.InvalidInputError: x.jsonl line 1 is not UTF-8 text (byte 0 is 0xff); pass a UTF-8 JSON file
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            byte = f"byte {exc.start} is {data[exc.start]:#04x}"
            raise error(f"{where} is not UTF-8 text ({byte}); pass a UTF-8 JSON file") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise error(f"{where} nests JSON too deeply to read; a record nests a few levels") from None
    except ValueError as exc:  # JSONDecodeError, and integers longer than Python converts
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{where} is not JSON ({reason})") from None


def _open(path: Path, what: str, error: type[EvidraError], fix: str) -> Any:
    try:
        return path.open("rb")
    except OSError as exc:
        raise error(f"{what}: cannot read {str(path)!r} ({exc.strerror or exc}); {fix}") from None


def read_json_lines(
    path: str | Path,
    what: str,
    error: type[EvidraError] = InvalidInputError,
    fix: str = "pass a JSON Lines file",
) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for each non-blank line of JSON Lines file ``path``, read one line
    at a time; ``what`` names the option or setting the file came from in errors, ``fix`` says
    what to pass when the file cannot be opened."""
    file = Path(path)
    with _open(file, what, error, fix) as fh:
        n = 0
        while True:
            try:
                line = fh.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise error(f"{what}: cannot read {str(file)!r} ({exc.strerror or exc})") from None
            if not line:
                return
            n += 1
            if len(line) > MAX_LINE_BYTES:
                raise error(
                    f"{what} {str(file)!r} line {n} is longer than {_size(MAX_LINE_BYTES)}; "
                    "pass a JSON Lines file, one record a line"
                )
            if line.strip():
                yield n, parse_json(line, f"{what} {str(file)!r} line {n}", error)


def read_json(
    path: str | Path, what: str, error: type[EvidraError] = InvalidInputError, fix: str = "pass a JSON file"
) -> Any:
    """The JSON document in file ``path`` (at most ``MAX_FILE_BYTES``)."""
    file = Path(path)
    with _open(file, what, error, fix) as fh:
        try:
            data = fh.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise error(f"{what}: cannot read {str(file)!r} ({exc.strerror or exc})") from None
    if len(data) > MAX_FILE_BYTES:
        cap = _size(MAX_FILE_BYTES)
        raise error(f"{what} {str(file)!r} is larger than {cap}; split it, or write it as JSON Lines")
    return parse_json(data, f"{what} {str(file)!r}", error)
