"""Staging names that carry the writer's process id, so leftovers of a killed run can be told apart.

A writer that builds something under a temporary name (a page PNG, an index folder) puts its
process id in the name; the next run removes leftovers whose writer no longer runs and keeps
those of a writer that still does (another ingest or build working beside it).
"""

from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid: int) -> bool:
    """Whether a process with id ``pid`` runs on this machine (assumed so where it cannot be checked).

    >>> process_alive(os.getpid())
    True
    """
    if os.name != "posix":
        return True  # no cheap check (os.kill would end the process): keep what it may own
    try:
        os.kill(pid, 0)  # signal 0 only checks that the process exists
    except (ProcessLookupError, OverflowError):
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def pid_in_name(name: str, position: int) -> int | None:
    """The process id at dot-separated ``position`` of ``name``, or ``None`` if there is none.

    >>> pid_in_name(".doc-p0001.4242.x1y2.tmp", 2), pid_in_name(".doc-p0001.x1y2.tmp", 2)
    (4242, None)
    """
    parts = name.split(".")
    if len(parts) <= position + 1 or not parts[position].isdigit():
        return None
    return int(parts[position])


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file, or a folder after a rename into it) to disk."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # some platforms cannot open directories; rename is still atomic there
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def current_umask() -> int:
    """The process's umask (read from /proc where it can be, so no other thread sees it change).

    >>> 0 <= current_umask() <= 0o777
    True
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def give_default_modes(root: Path) -> None:
    """``root`` and everything under it get the modes a new file (0o666) or folder (0o777) gets
    under the umask: what a writer made private (safetensors writes 0o600) becomes as readable
    as the user's other files. Links are left alone; nothing outside ``root`` is touched."""
    mask = current_umask()
    for path in [root, *root.rglob("*")]:
        if path.is_symlink():
            continue
        os.chmod(path, (0o777 if path.is_dir() else 0o666) & ~mask)
