"""Names read from an index's own files (``retriever.json``'s ``data_dir``, ``index.sqlite``'s
shard table, a checkpoint's weight index) never reach outside the index: a planted name stops the
command in one line before anything is read, replaced or deleted."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
from pathlib import Path

import pytest
from index_faults import BEFORE, add_missing, encoder_factories

from evidra.core.errors import CorpusError, ModelLoadError
from evidra.retrieval.interfaces import ENCODERS
from evidra.retrieval.lifecycle.index_folder import build_index, read_spec


@pytest.fixture(autouse=True)
def hash_encoders(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, factory in encoder_factories().items():
        monkeypatch.setitem(ENCODERS._items, name, factory)


def _bm25(root: Path) -> Path:
    """A BM25 index whose files sit in a ``data_dir`` folder (as after one ``index add``)."""
    build_index(BEFORE[:2], root, "bm25", "").close()
    add_missing(root, BEFORE[2:])
    assert read_spec(root).data_dir
    return root


def _files(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_a_data_dir_naming_another_index_deletes_nothing(tmp_path: Path) -> None:
    index, victim = _bm25(tmp_path / "idx"), _bm25(tmp_path / "victim")
    victim_files = _files(victim)
    manifest = index / "retriever.json"
    spec = json.loads(manifest.read_text())
    for planted in (str(victim / read_spec(victim).data_dir), f"../victim/{read_spec(victim).data_dir}"):
        spec["data_dir"] = planted
        manifest.write_text(json.dumps(spec))
        before = _files(index)
        with pytest.raises(CorpusError, match=r"data_dir in .*retriever\.json names .* not inside") as err:
            add_missing(index)
        assert "\n" not in str(err.value)
        assert _files(victim) == victim_files and _files(index) == before


def test_a_data_dir_of_the_index_itself_deletes_nothing(tmp_path: Path) -> None:
    index = _bm25(tmp_path / "idx")
    spec = json.loads((index / "retriever.json").read_text())
    for entry in (index / spec["data_dir"]).iterdir():  # its files where "." finds them
        (shutil.copytree if entry.is_dir() else shutil.copy)(entry, index / entry.name)
    for planted in (".", "bm25.x/..", ""):
        spec["data_dir"] = planted
        (index / "retriever.json").write_text(json.dumps(spec))
        if planted == "":  # the older layout (files in the index itself) stays readable
            add_missing(index)
            continue
        before = _files(index)
        with pytest.raises(CorpusError, match=f"names '{re.escape(planted)}', which is not inside"):
            add_missing(index)
        assert _files(index) == before


def test_a_shard_name_outside_the_index_is_never_read(tmp_path: Path) -> None:
    index = tmp_path / "idx"
    build_index(BEFORE, index, "hash-multi", "hash").close()
    outside = tmp_path / "outside.npy"
    shutil.copy(next((index / "shards").iterdir()), outside)
    with sqlite3.connect(index / "index.sqlite") as conn:
        conn.execute("UPDATE shards SET name = ?", (str(outside),))
        conn.execute("UPDATE pages SET shard = ?", (str(outside),))
    from evidra.retrieval.lifecycle.index_folder import open_index

    with pytest.raises(CorpusError, match=r"index\.sqlite \(shard table\) names .*outside\.npy"):
        open_index(index)


def test_a_weight_index_naming_files_outside_the_checkpoint_is_refused(tmp_path: Path) -> None:
    from evidra.retrieval.encoders.colvision_native import read_weights

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (tmp_path / "secret.safetensors").write_bytes(b"not read")
    index = {"weight_map": {"a.weight": "../secret.safetensors"}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match=r"weight_map of .* names '\.\./secret\.safetensors'"):
        read_weights(folder, ("model",))


def _npz_bomb(path: Path, indptr: object, length: int) -> None:
    """``counts.npz`` whose ``terms`` and ``counts`` hold ``length`` zeros each, deflated."""
    import zipfile

    import numpy as np

    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("indptr.npy", "w") as fh:
            np.lib.format.write_array(fh, np.asarray(indptr))
        for name in ("terms", "counts"):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as fh:
                header = {"descr": "<i4", "fortran_order": False, "shape": (length,)}
                np.lib.format.write_array_header_1_0(fh, header)
                block = bytes(1 << 22)
                for _ in range(length * 4 // len(block)):
                    fh.write(block)


def test_a_bm25_counts_archive_that_expands_to_gigabytes_is_refused_unpacked(tmp_path: Path) -> None:
    """A 3 MB counts.npz once took 3.4 GB to read; each member's declared shape and size are now
    checked against the index's own (uncompressed) sizes before anything is decompressed."""
    import tracemalloc

    import numpy as np

    index = _bm25(tmp_path / "idx")
    counts = next(index.glob("bm25.*/bm25-*/counts.npz"))
    with np.load(counts) as npz:
        indptr = npz["indptr"]
    _npz_bomb(counts, indptr, 16 << 20)  # 2 x 64 MiB of zeros in about 130 KB
    assert counts.stat().st_size < 1 << 20
    from evidra.retrieval.lifecycle.index_folder import open_index

    tracemalloc.start()
    with pytest.raises(CorpusError, match=r"counts\.npz declares terms of shape \(16777216,\)") as err:
        open_index(index)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 16 << 20 and "\n" not in str(err.value)
