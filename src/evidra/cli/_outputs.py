"""Output paths checked before the work: a command that would generate for minutes and then fail
to write its result (a folder named where a file goes, a file where a folder goes, a parent that
is a file or not writable) stops at once with one line naming the option. A command that fails
while it prepares leaves no output folder it made (``removed_on_failure``)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from evidra.core.errors import InvalidInputError


def _check_parent(path: Path, option: str) -> None:
    existing = next((p for p in path.absolute().parents if p.exists()), None)
    if existing is None:
        return
    if not existing.is_dir():
        raise InvalidInputError(
            f"{option} {str(path)!r}: {str(existing)!r} is a file, not a folder; choose another path"
        )
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInputError(
            f"{option} {str(path)!r}: cannot write in {str(existing)!r}; choose another path"
        )


def check_output_file(path: str | Path, option: str, example: str) -> None:
    """Refuse ``path`` as the file ``option`` writes, unless it can be written there; ``example``
    is a file name to suggest inside a folder given by mistake."""
    out = Path(path)
    if out.is_dir():
        suggestion = out / example
        raise InvalidInputError(
            f"{option} {str(path)!r} is a folder; name a file, e.g. {option} {suggestion}"
        )
    if out.exists() and not os.access(out, os.W_OK):
        raise InvalidInputError(f"{option} {str(path)!r} is not writable; choose another file")
    _check_parent(out, option)


def check_output_dir(path: str | Path, option: str) -> None:
    """Refuse ``path`` as the folder ``option`` writes into, unless it is or can become one."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise InvalidInputError(f"{option} {str(path)!r} is a file; name a folder (new or existing)")
    _check_parent(out, option)


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` (itself included) that does not exist yet."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


@contextmanager
def removed_on_failure(path: str | Path) -> Iterator[None]:
    """Run the block; if it fails, remove what it made of output ``path``: the outermost of its
    folders that did not exist before the block (``path`` itself, or a parent made on the way).
    A folder that existed is never touched."""
    made = _first_missing(Path(path).absolute())
    try:
        yield
    except BaseException:
        if made is not None and made.is_dir():
            shutil.rmtree(made, ignore_errors=True)
        raise
