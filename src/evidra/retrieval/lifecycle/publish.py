"""How an index directory changes without ever showing a half-written state.

* A build fills ``.{name}.building.{pid}.*`` beside the target and ``publish`` moves it into place,
  the manifest last; ``remove_stale_builds`` removes the folders of builds that no longer run
  (dropping the Qdrant collection one noted, ``qdrant_build.drop_noted``).
* Files that a backend rewrites whole (BM25's) live in a folder ``{prefix}.*`` inside the index
  that the manifest names: ``save_generation`` saves a new folder, the caller switches the
  manifest to it, then removes the old one, so the manifest always names a complete folder.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from evidra.retrieval.lifecycle.qdrant_build import drop_noted
from evidra.safeio.staging import pid_in_name, process_alive

logger = logging.getLogger(__name__)


def fsync_path(path: Path) -> None:
    """Flush ``path`` (a file or a folder's entries) to disk; a no-op where folders cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(staging: Path, out: Path, manifest: str) -> None:
    """Move the finished index in ``staging`` to ``out``, its ``manifest`` last.

    A missing ``out`` is one rename. Into an existing folder (one with inline images, say) each
    entry moves on its own, replacing an entry of the same name: ``out`` has no manifest, so such
    an entry can only be the leftover of a build interrupted while publishing.
    """
    if not out.exists():
        os.rename(staging, out)
        return
    for entry in sorted(staging.iterdir(), key=lambda p: p.name == manifest):
        target = out / entry.name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target)
        os.replace(entry, target)
    staging.rmdir()


def remove_stale_builds(out: Path) -> None:
    """Remove staging folders of earlier builds of ``out`` whose process no longer runs."""
    for path in out.parent.glob(f".{glob.escape(out.name)}.building.*"):
        pid = pid_in_name(path.name[len(out.name) + 1 :], 2)
        if path.is_dir() and (pid is None or not process_alive(pid)):
            logger.info("removing %s, left by an interrupted index build", path)
            drop_noted(path)
            shutil.rmtree(path, ignore_errors=True)


def save_generation(root: Path, prefix: str, save: Callable[[Path], object], *, keep: str) -> str:
    """Save files through ``save(folder)`` into a new folder of ``root``; returns its name.

    The folder is written as ``{prefix}.{pid}.{random}`` and, once its files are flushed to disk,
    renamed ``{prefix}.{random}``: complete, ready for the manifest to name. First removes the
    ``{prefix}.*`` folders the manifest does not name (``keep``): complete ones (a change killed
    before it named or after it replaced them) and those of writers that no longer run.
    """
    for path in root.glob(f"{glob.escape(prefix)}.*"):
        pid = pid_in_name(path.name, 1)
        if path.is_dir() and path.name != keep and (pid is None or not process_alive(pid)):
            logger.info("removing %s, left by an interrupted index change", path)
            shutil.rmtree(path, ignore_errors=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{prefix}.{os.getpid()}.", dir=root))
    done = root / f"{prefix}.{folder.name.rsplit('.', 1)[1]}"
    try:
        save(folder)
        for entry in folder.rglob("*"):
            fsync_path(entry)
        fsync_path(folder)
        os.rename(folder, done)
        fsync_path(root)
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return done.name
