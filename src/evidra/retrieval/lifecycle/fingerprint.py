"""Which encoder built an index: a fingerprint of its checkpoint's weights and processor config.

Page embeddings only make sense to the encoder that made them: searching a ColQwen2 index with
another checkpoint gives other, silently wrong results. ``evidra index build`` therefore records
a fingerprint of the checkpoint folder (``IndexSpec.encoder_fingerprint``), and opening the
index compares it with the checkpoint about to embed the queries (``check_encoder``): a
mismatch is a one-line error naming both.

The fingerprint is a SHA-256 over every file of the folder (sorted relative names and sizes),
the whole content of the small files (configs, processor and tokenizer files, up to
``SMALL_FILE`` bytes) and the first and last ``EDGE`` bytes of the large ones (weights: a
safetensors file starts with its header of tensor names, shapes and offsets, and any training
step changes the values at both ends). Reading a few MiB keeps opening a multi-GB checkpoint
fast. ``tiny:ARCH`` and hub ids resolve to their folders like any other reference.

>>> import tempfile, pathlib
>>> with tempfile.TemporaryDirectory() as tmp:
...     d = pathlib.Path(tmp); _ = (d / "config.json").write_text("{}")
...     a = fingerprint(d); _ = (d / "config.json").write_text('{"x": 1}'); a == fingerprint(d)
False
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from evidra.core.errors import InvalidInputError

SMALL_FILE = 16 * 1024 * 1024
EDGE = 1024 * 1024
MAX_FILES = 10_000
SHOWN = 12  # hex digits of a fingerprint shown in messages


def fingerprint(folder: str | Path) -> str:
    """The fingerprint of checkpoint folder ``folder`` (see the module docstring)."""
    root = Path(folder)
    files = sorted(p for p in root.rglob("*") if p.is_file() and not _hidden(p.relative_to(root)))
    if len(files) > MAX_FILES:
        raise InvalidInputError(f"{root} holds over {MAX_FILES} files; pass the checkpoint folder itself")
    digest = hashlib.sha256()
    for path in files:
        size = path.stat().st_size
        digest.update(f"{path.relative_to(root).as_posix()}\0{size}\0".encode())
        with path.open("rb") as f:
            if size <= SMALL_FILE:
                digest.update(f.read(SMALL_FILE + 1))
            else:
                digest.update(f.read(EDGE))
                f.seek(size - EDGE)
                digest.update(f.read(EDGE))
    return "sha256:" + digest.hexdigest()


def _hidden(rel: Path) -> bool:
    """Caches and lock files (``.cache/``, ``.lock``) that tools write beside a checkpoint."""
    return any(part.startswith(".") for part in rel.parts) or rel.suffix == ".lock"


def short(fp: str) -> str:
    return fp.removeprefix("sha256:")[:SHOWN]


def check_encoder(
    index: str | Path, recorded_path: str, recorded: str, given_path: str, given_folder: Path
) -> None:
    """Refuse to search index ``index`` (built by ``recorded_path``, fingerprint ``recorded``) with
    the checkpoint ``given_path`` at ``given_folder`` unless their fingerprints agree."""
    if not recorded:
        return  # an index built before fingerprints were recorded: nothing to compare
    found = fingerprint(given_folder)
    if found != recorded:
        raise InvalidInputError(
            f"index {os.fspath(index)} was built with encoder {recorded_path} "
            f"(fingerprint {short(recorded)}), "
            f"but {given_path} has fingerprint {short(found)}: other weights give other embeddings; pass "
            f"--encoder with the checkpoint that built it, or rebuild the index with this one"
        )
