"""`index add` is all or nothing for the directory's own stores, whatever moment it fails or is
killed at; a Qdrant build shows nothing under its collection name until every page is in.

Kills are real (SIGKILL from inside a child process, at a named point, or from this process at a
random moment); each test then checks the index loads and searches exactly as before the add or
as after it, and that running the add (or build) again completes it and clears the leftovers.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from index_faults import (
    BEFORE,
    KILL_POINTS,
    NEW,
    STAND_IN_URL,
    Snapshot,
    add_missing,
    encoder_factories,
    serve_locally,
    snapshot,
)

from evidra.core.errors import InvalidInputError
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.index._shards import ShardBatch
from evidra.retrieval.interfaces import ENCODERS
from evidra.retrieval.lifecycle.index_folder import MANIFEST, QdrantSpec, build_index, open_index, read_spec

ENCODER = {"maxsim": "hash-multi", "dense": "hash-single", "bm25": "bm25"}
CHILD = "import sys, index_faults; index_faults.child_main(sys.argv[1:])"


@pytest.fixture(autouse=True)
def hash_encoders(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, factory in encoder_factories().items():
        monkeypatch.setitem(ENCODERS._items, name, factory)


def _indexes(tmp_path: Path, kind: str) -> tuple[Path, Snapshot, Snapshot]:
    """An index of ``BEFORE`` (to copy and damage), its snapshot, and the snapshot after adding ``NEW``."""
    base = tmp_path / f"{kind}-base"
    build_index(BEFORE, base, ENCODER[kind], "" if kind == "bm25" else "hash").close()
    after = tmp_path / f"{kind}-after"
    shutil.copytree(base, after)
    add_missing(after)
    before, done = snapshot(base), snapshot(after)
    assert len(before[0]) == 4 and len(done[0]) == 11 and before != done
    return base, before, done


def _leftovers(root: Path) -> list[str]:
    """Files the index does not reference: unreferenced shards, or BM25 folders the manifest does not name."""
    spec = read_spec(root)
    if spec.backend == "bm25":
        return sorted(p.name for p in root.glob("bm25.*") if p.name != spec.data_dir)
    from evidra.retrieval.index._shards import ShardStore

    store = ShardStore.open(root)
    referenced = set(store.shard_names())
    store.close()
    return sorted(p.name for p in (root / "shards").iterdir() if p.name not in referenced)


def _child(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], env=env, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def _killed(*args: str) -> None:
    """Run the child until its armed point kills it."""
    proc = _child(*args)
    assert proc.wait(timeout=120) == -signal.SIGKILL


# -- failures inside the process ---------------------------------------------------------------


@pytest.mark.parametrize("kind", ["maxsim", "dense"])
def test_a_failed_add_leaves_the_shard_store_as_it_was(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, before, after = _indexes(tmp_path, kind)
    real, calls = ShardBatch.write, []

    def fails_on_the_third(self: ShardBatch, *args: Any) -> None:
        calls.append(1)
        if len(calls) == 3:
            raise OSError("disk full")
        real(self, *args)

    with monkeypatch.context() as m, open_index(root) as engine:
        m.setattr(ShardBatch, "write", fails_on_the_third)
        with pytest.raises(OSError, match="disk full"):
            engine.add(NEW, batch_pages=2)  # two batches of two pages were written before the failure
        assert engine.index.page_ids() == list(before[0])  # nothing shows in memory either
    assert snapshot(root) == before and _leftovers(root) == []  # and the written shards are gone
    add_missing(root)
    assert snapshot(root) == after


def test_a_failed_bm25_add_leaves_the_files_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, before, after = _indexes(tmp_path, "bm25")
    named = read_spec(root).data_dir

    def cut_short(self: BM25Retriever, path: str | Path) -> None:
        (Path(path) / "partial").write_text("{")
        raise OSError("disk full")

    with monkeypatch.context() as m, pytest.raises(OSError, match="disk full"):
        m.setattr(BM25Retriever, "save", cut_short)
        add_missing(root)
    assert snapshot(root) == before and read_spec(root).data_dir == named and _leftovers(root) == []
    add_missing(root)
    assert snapshot(root) == after and read_spec(root).data_dir != named
    assert not (root / named).exists()  # the replaced folder is removed


# -- kills at named points ---------------------------------------------------------------------

_slow = pytest.mark.slow
KILLS = [
    pytest.param("maxsim", "shards:between-batches", "before", id="maxsim-between-batches"),
    pytest.param("maxsim", "shards:before-commit", "before", marks=_slow, id="maxsim-before-commit"),
    pytest.param("maxsim", "shards:after-commit", "after", marks=_slow, id="maxsim-after-commit"),
    pytest.param("dense", "shards:between-batches", "before", marks=_slow, id="dense-between-batches"),
    pytest.param("dense", "shards:before-commit", "before", marks=_slow, id="dense-before-commit"),
    pytest.param("dense", "shards:after-commit", "after", marks=_slow, id="dense-after-commit"),
    pytest.param("bm25", "bm25:mid-save", "before", id="bm25-mid-save"),
    pytest.param("bm25", "bm25:before-manifest", "before", marks=_slow, id="bm25-before-manifest"),
    pytest.param("bm25", "bm25:after-manifest", "after", marks=_slow, id="bm25-after-manifest"),
]


@pytest.mark.parametrize(("kind", "point", "state"), KILLS)
def test_an_add_killed_at_a_named_point_shows_the_old_or_the_new_index(
    tmp_path: Path, kind: str, point: str, state: str
) -> None:
    base, before, after = _indexes(tmp_path, kind)
    root = tmp_path / "victim"
    shutil.copytree(base, root)
    _killed("add", str(root), point)
    assert snapshot(root) == (before if state == "before" else after)
    if point in ("shards:between-batches", "shards:before-commit", "bm25:mid-save", "bm25:before-manifest"):
        assert _leftovers(root)  # the kill came after new files were written, before they counted
    add_missing(root)  # the rerun completes the add and removes what the killed one left
    assert snapshot(root) == after and _leftovers(root) == []


def test_every_kill_point_is_tested() -> None:
    tested = {p.values[1] for p in KILLS}
    assert tested == {*KILL_POINTS, "bm25:mid-save"} - {p for p in KILL_POINTS if p.startswith("qdrant:")}


# -- kills at random moments -------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["maxsim", "dense", "bm25"])
def test_an_add_killed_at_random_moments_shows_the_old_or_the_new_index(tmp_path: Path, kind: str) -> None:
    """Every stage sleeps 40 ms before and after its work (encoder, shard writes, commit, BM25
    save, manifest); an add run to its end gives the duration, and kills at random moments
    within it land in any stage."""
    base, before, after = _indexes(tmp_path, kind)
    timed = tmp_path / "timed"
    shutil.copytree(base, timed)
    proc = _child("add", str(timed), "slow", "0.04")
    start = time.perf_counter()
    assert proc.stdout is not None and proc.stdout.readline() == "done\n"
    duration = time.perf_counter() - start  # from "ready" to the add's end, start-up and exit excluded
    assert proc.wait(timeout=120) == 0
    assert snapshot(timed) == after
    rng = random.Random(1234)
    seen = []
    for i in range(4):
        root = tmp_path / f"victim{i}"
        shutil.copytree(base, root)
        proc = _child("add", str(root), "slow", "0.04")
        time.sleep((i + rng.random()) / 4 * duration)  # one kill in each quarter of the add
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=120)
        state = snapshot(root)
        assert state in (before, after), f"kill {i} left a mix of {len(state[0])} pages"
        seen.append("after" if state == after else "before")
        add_missing(root)
        assert snapshot(root) == after and _leftovers(root) == []
    assert "before" in seen, seen  # the first kill falls in the first quarter: mid-add


# -- Qdrant builds on a server (qdrant-client's local mode stands in for it) ---------------------


@pytest.fixture()
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The folder of the local-mode store that answers ``STAND_IN_URL`` during the test."""
    qdrant_client = pytest.importorskip("qdrant_client")
    folder = tmp_path / "qdrant"  # outside the index folder: it outlives a failed build
    monkeypatch.setattr(qdrant_client, "QdrantClient", serve_locally(folder))
    return folder


def _collections(path: Path) -> tuple[list[str], dict[str, str], dict[str, int]]:
    """Collections, aliases and point counts of the Qdrant local-mode store at ``path``."""
    from qdrant_client import QdrantClient

    client = QdrantClient(path=str(path))
    try:
        names = sorted(c.name for c in client.get_collections().collections)
        aliases = {a.alias_name: a.collection_name for a in client.get_aliases().aliases}
        return names, aliases, {n: client.count(n, exact=True).count for n in names}
    finally:
        client.close()


def test_a_failed_qdrant_build_leaves_no_collection_and_a_rebuild_publishes_an_alias(
    tmp_path: Path, server: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evidra.retrieval.index.qdrant import QdrantIndex

    store = server
    spec = QdrantSpec(url=STAND_IN_URL, collection="pages", candidates=0)

    def broken(self: QdrantIndex, *args: object) -> None:
        raise OSError("connection reset")

    with monkeypatch.context() as m, pytest.raises(OSError, match="connection reset"):
        m.setattr(QdrantIndex, "update", broken)
        build_index([*BEFORE, *NEW], tmp_path / "idx", "hash-multi", "hash", qdrant=spec)
    assert _collections(store) == ([], {}, {})  # the staging collection was dropped
    assert sorted(p.name for p in tmp_path.iterdir()) == ["qdrant"]
    build_index([*BEFORE, *NEW], tmp_path / "idx", "hash-multi", "hash", qdrant=spec).close()
    names, aliases, counts = _collections(store)
    assert len(names) == 1 and names[0].startswith("pages-") and aliases == {"pages": names[0]}
    assert counts == {names[0]: 11}
    assert len(snapshot(tmp_path / "idx")[0]) == 11  # searched through the alias
    with pytest.raises(InvalidInputError, match=r"'pages' at .* already holds 11 pages"):
        build_index(BEFORE, tmp_path / "again", "hash-multi", "hash", qdrant=spec)
    assert _collections(store)[0] == names  # the refused build left no collection behind


def test_a_qdrant_build_replaces_an_empty_collection_of_the_same_name(tmp_path: Path, server: Path) -> None:
    spec = QdrantSpec(url=STAND_IN_URL, collection="pages")
    spec.connect(8, create=True).close()  # an empty evidra collection called "pages"
    build_index(BEFORE, tmp_path / "idx", "hash-multi", "hash", qdrant=spec).close()
    names, aliases, counts = _collections(server)
    assert names != ["pages"] and aliases == {"pages": names[0]} and counts == {names[0]: 4}


@pytest.mark.slow
@pytest.mark.parametrize("point", ["qdrant:after-first-batch", "qdrant:after-alias"])
def test_a_killed_qdrant_build_is_dropped_by_the_next(tmp_path: Path, server: Path, point: str) -> None:
    store, out = server, tmp_path / "idx"
    _killed("build", str(out), point, "0", str(store))
    names, aliases, counts = _collections(store)
    assert len(names) == 1 and counts[names[0]] == 11 and not (out / MANIFEST).exists()
    if point == "qdrant:after-first-batch":
        assert "evidra_pages" not in names and aliases == {}  # the target name shows no points
    else:
        assert aliases == {"evidra_pages": names[0]}  # complete, but its index folder is not published
    build_index([*BEFORE, *NEW], out, "hash-multi", "hash", qdrant=QdrantSpec(url=STAND_IN_URL)).close()
    again, aliases, counts = _collections(store)
    assert len(again) == 1 and again != names and aliases == {"evidra_pages": again[0]}
    assert counts == {again[0]: 11} and len(snapshot(out)[0]) == 11
