"""Every JSON file evidra opens is measured before it is read: a planted 2 GiB file (sparse, so it
costs no disk) is refused in one line naming the file, its size, the cap and the fix, having read
nothing; a file within its cap reads as before; a FIFO planted under a JSON name never blocks."""

from __future__ import annotations

import json
import os
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import EvidraError, InvalidInputError
from evidra.safeio import jsonfiles as jsonio
from evidra.safeio.jsonfiles import FileTooLargeError, read_capped, read_capped_text, read_json, read_lines

PLANTED = 2 << 30  # 2 GiB
MOST_MEMORY = 100 << 20  # what refusing one may cost: nothing of the file is read


def _plant(path: Path, size: int = PLANTED) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as fh:
        fh.truncate(size)  # sparse: no disk is written
    return path


def _index_manifest(root: Path) -> None:
    from evidra.retrieval.lifecycle.manifest import read_spec

    _plant(root / "retriever.json")
    read_spec(root)


def _bm25_manifest(root: Path) -> None:
    from evidra.retrieval.encoders._bm25_files import MANIFEST, read_index

    _plant(root / MANIFEST)
    read_index(root)


def _model_config(root: Path) -> None:
    from evidra.models.loading import read_model_type

    _plant(root / "config.json")
    read_model_type(root)


def _colpali_config(root: Path) -> None:
    from evidra.retrieval.encoders.colvision_native import colpali_engine_classes

    _plant(root / "config.json")
    colpali_engine_classes(root)


def _checkpoint_checksums(root: Path) -> None:
    from evidra.rl.runs.checkpoint import CHECKSUMS, verify_checkpoint

    _plant(root / CHECKSUMS)
    verify_checkpoint(root)


def _benchmark_file(root: Path) -> None:
    read_json(_plant(root / "benchmark.json"), "benchmark file")


READERS: dict[str, tuple[Callable[[Path], None], str]] = {
    "retriever.json": (_index_manifest, "rebuild the index"),
    "bm25.index.json": (_bm25_manifest, "rebuild the index"),
    "config.json": (_model_config, "download it again"),
    "colpali config.json": (_colpali_config, "restore or rebuild it"),
    "checksums.json": (_checkpoint_checksums, "restore or rebuild it"),
    "benchmark.json": (_benchmark_file, "split it, or write it as JSON Lines"),
}


@pytest.mark.parametrize("name", list(READERS))
def test_a_planted_2gib_json_file_is_refused_unread(name: str, tmp_path: Path) -> None:
    read, fix = READERS[name]
    with pytest.raises(EvidraError):  # imports the reader's modules before memory is traced
        read(tmp_path / "warm")
    tracemalloc.start()
    try:
        with pytest.raises(EvidraError) as info:
            read(tmp_path / "planted")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message and name.split()[-1] in message, message
    assert "is 2.0 GiB, over its" in message and " cap; " in message and fix in message, message
    assert peak < MOST_MEMORY, f"refusing {name} took {peak >> 20} MiB"


def test_the_size_is_measured_before_reading(tmp_path: Path) -> None:
    exact, over = tmp_path / "exact.json", tmp_path / "over.json"
    exact.write_bytes(b"[1, 2]")
    over.write_bytes(b"[1, 22]")
    assert json.loads(read_capped_text(exact, "record", cap=6)) == [1, 2]
    with pytest.raises(
        FileTooLargeError, match=r"^record '.*over\.json' is 7 bytes, over its 6 bytes cap; fix"
    ):
        read_capped(over, "record", cap=6, fix="fix")


def test_a_file_that_is_missing_or_no_file_keeps_its_os_error(tmp_path: Path) -> None:
    """Callers word a missing file their own way ("build it with ..."), as with ``read_text``."""
    with pytest.raises(FileNotFoundError):
        read_capped(tmp_path / "absent.json", "record")
    with pytest.raises(IsADirectoryError):
        read_capped(tmp_path, "record")


def test_a_fifo_planted_under_a_json_name_never_blocks(tmp_path: Path) -> None:
    fifo = tmp_path / "retriever.json"
    os.mkfifo(fifo)  # a plain open() would wait for a writer forever
    with pytest.raises(OSError, match="not a regular file"):
        read_capped(fifo, "index manifest")


def test_a_line_over_its_cap_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jsonio, "MAX_LINE_BYTES", 16)
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1}\n\n' + "x" * 40 + "\n")
    lines = read_lines(path, "metrics file")
    assert next(lines) == (1, b'{"step": 1}\n')  # the blank line 2 is skipped
    with pytest.raises(
        InvalidInputError, match=r"metrics file '.*metrics\.jsonl' line 3 is longer than 16 bytes"
    ):
        next(lines)


def test_an_oversized_cache_is_rebuilt_not_read(tmp_path: Path) -> None:
    """A synthetic-data cache over its cap is a cache to rebuild, nothing to refuse."""
    from evidra.data.synth.corpus_json import build_once

    cache = _plant(tmp_path / "samples.json")
    built: list[Any] = []

    def build() -> list[int]:
        built.append(1)
        return [1, 2, 3]

    assert build_once(cache, build, json.dumps, json.loads, "sample cache") == [1, 2, 3]
    assert built == [1] and json.loads(cache.read_text()) == [1, 2, 3]
