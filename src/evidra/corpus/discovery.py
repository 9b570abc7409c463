"""Which files under an ingest root are documents to ingest, which are refused, which are skipped.

Only files under the root are read: a symlink resolving outside it is refused, as is a broken
one; hidden files and folders (names starting with ".") and the store's own directory are not
scanned. A visible file whose suffix ingest does not read is skipped and counted, so a run that
finds nothing to ingest says what it found instead (``14 files skipped as unsupported (.md x14)``).
Metadata sidecars (``<file>.meta.json``) belong to their document and are not counted.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from evidra.corpus.metadata import SIDECAR_SUFFIX
from evidra.corpus.renderer import SUPPORTED_SUFFIXES

MAX_SUFFIXES_SHOWN = 5


@dataclass(frozen=True)
class FailedFile:
    """A file that was not ingested, and why."""

    path: str  # relative to the ingest root
    reason: str


@dataclass(frozen=True)
class Discovered:
    """What a walk of an ingest root found."""

    files: tuple[Path, ...]  # documents to ingest, sorted by path relative to the root
    refused: tuple[FailedFile, ...]  # links leaving the root, broken links
    unsupported: tuple[str, ...]  # paths relative to the root of files ingest does not read


def unsupported_summary(paths: Sequence[str]) -> str:
    """``"14 files skipped as unsupported (.md x14; ingest reads .bmp, ...)"``, or "" for none.

    >>> unsupported_summary(["a.md", "b.md", "notes.txt", "Makefile"]).split(";")[0]
    '4 files skipped as unsupported (.md x2, (no suffix) x1, .txt x1'
    """
    if not paths:
        return ""
    counts = Counter(PurePosixPath(p).suffix.lower() or "(no suffix)" for p in paths)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{suffix} x{n}" for suffix, n in ranked[:MAX_SUFFIXES_SHOWN])
    if len(ranked) > MAX_SUFFIXES_SHOWN:
        shown += f", {len(ranked) - MAX_SUFFIXES_SHOWN} more suffixes"
    return (
        f"{len(paths)} files skipped as unsupported ({shown}; ingest reads "
        f"{', '.join(sorted(SUPPORTED_SUFFIXES))})"
    )


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def discover(root: Path, *, recursive: bool = True, exclude: Path | None = None) -> Discovered:
    """The files under ``root`` (resolved): documents sorted by relative path, refused, unsupported.

    Symlinks are followed only while their targets stay inside ``root``; each real directory
    is visited once, so link cycles terminate.
    """
    files: list[Path] = []
    refused: list[FailedFile] = []
    unsupported: list[str] = []
    seen_dirs: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        here = Path(dirpath)
        real = here.resolve()
        rel_dir = here.relative_to(root)
        if real in seen_dirs or not _inside(real, root) or (exclude is not None and _inside(real, exclude)):
            if not _inside(real, root):
                refused.append(FailedFile(rel_dir.as_posix(), f"resolves to {real}, outside the ingest root"))
            dirnames[:] = []
            continue
        seen_dirs.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".")) if recursive else []
        for name in sorted(filenames):
            path = here / name
            rel = (rel_dir / name).as_posix()
            if name.startswith(".") or name.lower().endswith(SIDECAR_SUFFIX):
                continue
            if path.suffix.lower() not in SUPPORTED_SUFFIXES:
                unsupported.append(rel)
                continue
            target = path.resolve()
            if not _inside(target, root):
                refused.append(FailedFile(rel, f"resolves to {target}, outside the ingest root"))
            elif target.is_file():
                files.append(path)
            elif not target.exists():
                refused.append(FailedFile(rel, "is a broken symbolic link"))
    files.sort(key=lambda p: p.relative_to(root).as_posix())
    return Discovered(tuple(files), tuple(refused), tuple(sorted(unsupported)))


def collect(real: Path, recursive: bool, store_root: Path) -> tuple[Path, Discovered]:
    """The folder sources are relative to, and what ingest finds at ``real`` (a folder or a file)."""
    if real.is_file():
        return real.parent, Discovered((real,), (), ())
    return real, discover(real, recursive=recursive, exclude=store_root)
