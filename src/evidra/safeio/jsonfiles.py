"""Reading the JSON and JSON Lines files a user passes: every failure is one line naming the file.

A path that cannot be read (missing, a folder, no permission), bytes that are not UTF-8, a line
that is not JSON, JSON nested deeper than the parser can follow, and a line or file over its
size cap all end in an ``EvidraError`` (``InvalidInputError`` unless the caller names another
subclass) that says which file, which line and what to pass instead; never a traceback.

    for n, row in read_json_lines("val.jsonl", "--data"):
        ...

Every JSON file evidra opens goes through here: a user's file (``read_json``, ``read_json_lines``)
or one a tool wrote (an index's ``retriever.json``, a checkpoint's ``state.json``, a model's
``config.json``: ``read_capped_text``). Each is measured before a byte is read, and at most its
cap plus one byte is read, so a planted 2 GiB ``retriever.json`` is refused in one line having
cost nothing.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.core.jsonvalue import JSON

MAX_LINE_BYTES = 256 << 20  # one JSONL record (a benchmark row may carry base64 page images)
MAX_FILE_BYTES = 1 << 30  # one JSON document read whole
MAX_SMALL_BYTES = 64 << 20  # a manifest, config, state or checksum file a tool wrote: kilobytes in practice


class FileTooLargeError(EvidraError):
    """A file is over its size cap; raised before it is read. Neither a ``ValueError`` nor an
    ``OSError``, so the handlers callers keep around a read (for a missing or malformed file)
    let it through with its own message."""


def format_size(n: int) -> str:
    """``n`` bytes as a person reads it.

    >>> format_size(2 << 30), format_size(64 << 20), format_size(1536), format_size(12)
    ('2.0 GiB', '64.0 MiB', '1.5 KiB', '12 bytes')
    """
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} bytes"


def _too_large(path: Path, what: str, size: int | None, cap: int, fix: str) -> FileTooLargeError:
    measured = f"is {format_size(size)}" if size is not None else "grew while it was read"
    return FileTooLargeError(f"{what} {str(path)!r} {measured}, over its {format_size(cap)} cap; {fix}")


def _read_capped(fd: int, path: Path, what: str, cap: int, fix: str) -> bytes:
    """At most ``cap`` bytes of open file ``fd``: a regular file is measured first (``fstat``),
    so one over ``cap`` is refused unread; a pipe is read up to ``cap + 1`` bytes."""
    info = os.fstat(fd)
    regular = stat.S_ISREG(info.st_mode)
    if regular and info.st_size > cap:
        raise _too_large(path, what, info.st_size, cap, fix)
    with open(fd, "rb", closefd=False) as fh:
        data = fh.read(min(info.st_size, cap) + 1 if regular else cap + 1)
        if regular and len(data) > info.st_size:  # grew since, or a size the kernel does not know
            data += fh.read(cap + 1 - len(data))
    if len(data) > cap:
        raise _too_large(path, what, None, cap, fix)
    return data


def read_capped(
    path: str | Path,
    what: str,
    cap: int = MAX_SMALL_BYTES,
    fix: str = "the file is damaged or was planted: restore or rebuild it",
) -> bytes:
    """The bytes of regular file ``path``, at most ``cap`` of them.

    A file over ``cap`` is a one-line ``FileTooLargeError`` naming ``what`` and ``path``, its size,
    the cap and ``fix``, raised before anything is read. A file that cannot be opened raises the
    ``OSError`` ``Path.read_bytes`` would (callers word a missing file their own way), as does
    anything but a regular file (a FIFO planted under the name would block a plain read forever).
    """
    file = Path(path)
    fd = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, "is a directory", str(file))
        if not stat.S_ISREG(mode):
            raise OSError(errno.EINVAL, "not a regular file", str(file))
        return _read_capped(fd, file, what, cap, fix)
    finally:
        os.close(fd)


def read_capped_text(
    path: str | Path,
    what: str,
    cap: int = MAX_SMALL_BYTES,
    fix: str = "the file is damaged or was planted: restore or rebuild it",
) -> str:
    """``read_capped`` decoded as UTF-8 (a ``UnicodeDecodeError``, a ``ValueError``, otherwise):
    the drop-in for ``path.read_text()`` on a file evidra did not just write itself."""
    return read_capped(path, what, cap, fix).decode("utf-8")


def parse_json(data: str | bytes, where: str, error: type[EvidraError] = InvalidInputError) -> JSON:
    """``data`` decoded as UTF-8 JSON; ``where`` names it in the error ("--data 'a.jsonl' line 3").

    >>> parse_json('{"a": [1]}', "x")
    {'a': [1]}
    >>> parse_json(b"\\xff", "x.jsonl line 1")
    Traceback (most recent call last):
    evidra.core.errors.InvalidInputError: x.jsonl line 1 is not UTF-8 text (byte 0 is 0xff); pass ...
    """
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            byte = f"byte {exc.start} is {data[exc.start]:#04x}"
            raise error(f"{where} is not UTF-8 text ({byte}); pass a UTF-8 JSON file") from None
    try:
        value: JSON = json.loads(data)
    except RecursionError:
        raise error(f"{where} nests JSON too deeply to read; a record nests a few levels") from None
    except ValueError as exc:  # JSONDecodeError, and integers longer than Python converts
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise error(f"{where} is not JSON ({reason})") from None
    return value


def _open(path: Path, what: str, error: type[EvidraError], fix: str) -> BinaryIO:
    try:
        return path.open("rb")
    except OSError as exc:
        raise error(f"{what}: cannot read {str(path)!r} ({exc.strerror or exc}); {fix}") from None


def read_lines(
    path: str | Path,
    what: str,
    error: type[EvidraError] = InvalidInputError,
    fix: str = "pass a JSON Lines file",
) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` for each non-blank line of file ``path``, read one line at a time
    and each at most ``MAX_LINE_BYTES`` (a longer one is ``error``): for a JSON Lines file whose
    reader skips torn lines itself (a metrics file, a cache a killed run appended to)."""
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
                    f"{what} {str(file)!r} line {n} is longer than {format_size(MAX_LINE_BYTES)}; "
                    "pass a JSON Lines file, one record a line"
                )
            if line.strip():
                yield n, line


def read_json_lines(
    path: str | Path,
    what: str,
    error: type[EvidraError] = InvalidInputError,
    fix: str = "pass a JSON Lines file",
) -> Iterator[tuple[int, JSON]]:
    """``(line number, value)`` for each non-blank line of JSON Lines file ``path``, read one line
    at a time; ``what`` names the option or setting the file came from in errors, ``fix`` says
    what to pass when the file cannot be opened."""
    for n, line in read_lines(path, what, error, fix):
        yield n, parse_json(line, f"{what} {str(Path(path))!r} line {n}", error)


def read_json(
    path: str | Path, what: str, error: type[EvidraError] = InvalidInputError, fix: str = "pass a JSON file"
) -> JSON:
    """The JSON document in file ``path`` (at most ``MAX_FILE_BYTES``, measured before reading)."""
    file = Path(path)
    with _open(file, what, error, fix) as fh:
        try:
            data = _read_capped(
                fh.fileno(), file, what, MAX_FILE_BYTES, "split it, or write it as JSON Lines"
            )
        except FileTooLargeError as exc:
            raise error(str(exc)) from None
        except OSError as exc:
            raise error(f"{what}: cannot read {str(file)!r} ({exc.strerror or exc})") from None
    return parse_json(data, f"{what} {str(file)!r}", error)
