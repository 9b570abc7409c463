"""Sample subsets on disk: what ``evidra data filter`` keeps and ``data.subset`` trains on.

A subset file is JSONL, one row per filtered sample: ``{"id", "successes", "k", "kept"}``, the
kept rows first in curriculum order (easiest first), then the dropped ones. Only ``id`` and
``kept`` are read back; the rest documents the filter's decision.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evidra.core.errors import ConfigError
from evidra.safeio.jsonfiles import read_json_lines


@dataclass(frozen=True)
class SubsetRow:
    id: str
    successes: int
    k: int
    kept: bool


def write_subset(rows: Sequence[SubsetRow], path: str | Path) -> Path:
    """Write ``rows`` (kept ones first, in the order given) as JSONL."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    ordered = [r for r in rows if r.kept] + [r for r in rows if not r.kept]
    lines = [json.dumps({"id": r.id, "successes": r.successes, "k": r.k, "kept": r.kept}) for r in ordered]
    out.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return out


def read_subset(path: str | Path) -> list[str]:
    """The kept sample ids of a subset file, in file order; a ``ConfigError`` names a bad file or line.

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     f = os.path.join(tmp, "keep.jsonl")
    ...     _ = write_subset([SubsetRow("a", 8, 8, False), SubsetRow("b", 3, 8, True)], f)
    ...     read_subset(f)
    ['b']
    """
    ids: list[str] = []
    for n, row in read_json_lines(path, "data.subset", ConfigError, "write it with `evidra data filter`"):
        if not isinstance(row, dict) or "id" not in row:
            raise ConfigError(f"data.subset: {str(path)!r} line {n} is not a JSON object with an id")
        if row.get("kept", True):
            ids.append(str(row["id"]))
    if not ids:
        raise ConfigError(f"data.subset: {str(path)!r} keeps no sample")
    return ids
