"""Paths read from files evidra did not write itself stay inside the folder that holds them.

A page store's SQLite, an index's ``retriever.json`` and ``index.sqlite``, a checkpoint's
``checksums.json``: each names files relative to its own folder, and evidra reads, replaces or
deletes what they name. A damaged or planted file could name ``/elsewhere`` or ``../../x`` (and
a deletion of ``.`` removes the folder itself), so every such name goes through ``inside`` before
anything is touched.

The check is on the name as written: absolute names, names that climb out with ``..`` and
names of the folder itself are refused. Links inside the folder are followed, as they were
placed by whoever assembled the folder, not by the file that names them.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from evidra.core.errors import EvidraError, InvalidInputError


def inside(folder: str | Path, name: str, what: str, error: type[EvidraError] = InvalidInputError) -> Path:
    """``folder / name``, or ``error`` (one line naming ``what``) if ``name`` leaves ``folder``.

    ``what`` says where the name was read ("data_dir in idx/retriever.json").

    >>> inside("store", "pages/p1.png", "the page table").as_posix()
    'store/pages/p1.png'
    >>> inside("store", "../other/p1.png", "the page table")
    Traceback (most recent call last):
    evidra.core.errors.InvalidInputError: the page table names '../other/p1.png', which is not inside ...
    """
    root = Path(folder)
    if not _stays_inside(name):
        raise error(
            f"{what} names {name!r}, which is not inside {root}; the file is damaged or was "
            "planted: rebuild it rather than use it"
        )
    return root / name


def _stays_inside(name: str) -> bool:
    if not isinstance(name, str) or not name or "\x00" in name:
        return False
    pure = PurePath(name)
    if pure.is_absolute() or pure.drive or pure.root:
        return False
    normal = os.path.normpath(name)
    return normal not in (".", "..") and not normal.startswith((".." + os.sep, "../"))
