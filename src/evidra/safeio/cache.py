"""evidra's private cache folder: generated corpora of the recipes, tiny checkpoints built on demand."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from evidra.core.errors import ConfigError


def private_cache_dir(fix: str = "or set XDG_CACHE_HOME to a folder of your own") -> Path:
    """``$XDG_CACHE_HOME/evidra`` (default ``~/.cache/evidra``), created with mode 0700.

    Refused with a one-line error when another user owns it or others may write into it: what
    a cache holds is read back, so no one else may plant files there. ``fix`` ends that error
    with the caller's own way out."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "evidra"
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    info = root.stat()
    if info.st_uid != os.getuid() or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise ConfigError(
            f"cache folder {root} belongs to another user or is writable by others; remove it, {fix}"
        )
    return root
