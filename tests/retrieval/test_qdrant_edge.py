"""Qdrant Edge, the embedded engine of ``--backend qdrant``: its shard persists in the index
folder, reopens as it was, and a damaged or planted folder is refused in one line."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from index_faults import BEFORE, NEW, encoder_factories, snapshot

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.retrieval.index.qdrant_edge import EdgeQdrantIndex
from evidra.retrieval.interfaces import ENCODERS
from evidra.retrieval.lifecycle.index_folder import MANIFEST, QdrantSpec, build_index, open_index
from float_hits import assert_hits_close

pytest.importorskip("qdrant_edge")

DIM = 16


def _unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)


@pytest.fixture(autouse=True)
def hash_encoders(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, factory in encoder_factories().items():
        monkeypatch.setitem(ENCODERS._items, name, factory)


def test_a_shard_reopens_with_its_pages_payloads_deletions_and_updates(tmp_path: Path) -> None:
    pages = {f"p{i}": _unit(3 + i % 4, DIM, seed=i) for i in range(12)}
    queries = [_unit(4, DIM, seed=100 + i) for i in range(3)]
    with EdgeQdrantIndex.create(tmp_path / "shard", DIM, candidates=0) as index:
        index.add(
            list(pages),
            list(pages.values()),
            [f"{p}.png" for p in pages],
            payloads=[{"doc": f"d{i % 3}"} for i in range(12)],
        )
        assert index.delete(["p4", "missing"]) == 1
        index.update(["p5"], [pages["p0"]], ["p5.png"], [{"doc": "d2"}])  # p5 now holds p0's vectors
        before = index.search(queries, k=5, where={"doc": "d2"})
        with pytest.raises(InvalidInputError, match="update"):
            index.add(["p6"], [pages["p6"]])
    with EdgeQdrantIndex.open(tmp_path / "shard", DIM, candidates=0) as again:
        assert len(again) == 11 and "p4" not in again and again.page_ids()[:3] == ["p0", "p1", "p10"]
        assert_hits_close(again.search(queries, k=5, where={"doc": "d2"}), before)  # read back: float_hits
        assert all(h.page_id in {"p2", "p5", "p8", "p11"} for row in before for h in row)
        top = again.search([pages["p0"]], k=2)[0]
        assert {h.page_id for h in top} == {"p0", "p5"} and top[0].score == pytest.approx(top[1].score)
        assert top[0].image_path == f"{top[0].page_id}.png"


def test_one_process_holds_a_shard_and_a_failed_open_releases_it(tmp_path: Path) -> None:
    EdgeQdrantIndex.create(tmp_path / "shard", DIM).close()
    with pytest.raises(CorpusError, match=r"holds 16-d vectors, not 8-d; it was built with another encoder"):
        EdgeQdrantIndex.open(tmp_path / "shard", 8)
    with EdgeQdrantIndex.open(tmp_path / "shard", DIM) as held:
        with pytest.raises(CorpusError, match=r"cannot open the Qdrant Edge shard at .*WAL"):
            EdgeQdrantIndex.open(tmp_path / "shard", DIM)
        assert len(held) == 0
    with pytest.raises(InvalidInputError, match="not empty"):
        EdgeQdrantIndex.create(tmp_path / "shard", DIM)


def _edge_index(tmp_path: Path) -> tuple[Path, dict[str, object]]:
    root = tmp_path / "idx"
    build_index(BEFORE, root, "hash-multi", "hash", qdrant=QdrantSpec(path="qdrant", candidates=0)).close()
    spec = json.loads((root / MANIFEST).read_text())
    assert spec["backend"] == "qdrant-edge" and (root / "qdrant" / "edge_config.json").is_file()
    return root, spec


def test_an_index_folder_with_an_edge_shard_adds_deletes_and_reopens(tmp_path: Path) -> None:
    root, _ = _edge_index(tmp_path)
    ids, hits = snapshot(root)
    assert len(ids) == 4 and all(row for row in hits)
    with open_index(root) as engine:
        engine.add(NEW)
        assert engine.delete([BEFORE[0].id]) == 1
    with open_index(root) as engine:
        assert sorted(engine.index.page_ids()) == sorted(p.id for p in [*BEFORE[1:], *NEW])


def test_a_planted_index_folder_cannot_point_the_engine_outside_it(tmp_path: Path) -> None:
    root, spec = _edge_index(tmp_path)
    outside = tmp_path / "elsewhere"
    outside.mkdir()

    def refused(match: str) -> None:
        with pytest.raises(CorpusError, match=match) as err:
            open_index(root)
        assert "\n" not in str(err.value)

    for name in ("../elsewhere", str(outside), ".", ""):
        (root / MANIFEST).write_text(json.dumps({**spec, "qdrant": {**spec["qdrant"], "path": name}}))  # type: ignore[dict-item]
        refused("not a folder inside|exactly one")
    (root / MANIFEST).write_text(json.dumps(spec))
    segments = root / "qdrant" / "segments"
    os.symlink(outside, segments / "planted")  # a link in the shard to a folder outside
    refused(r"planted links outside")
    (segments / "planted").unlink()
    os.rename(root / "qdrant", tmp_path / "moved")
    os.symlink(tmp_path / "moved", root / "qdrant")  # the shard folder itself, a link outside
    refused(r"resolves outside")
    os.unlink(root / "qdrant")
    os.rename(tmp_path / "moved", root / "qdrant")
    assert len(snapshot(root)[0]) == 4  # the repaired folder opens again
    assert sorted(p.name for p in outside.iterdir()) == []  # nothing was written outside


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ("{garbage", r"does not describe an evidra shard \(JSONDecodeError"),
        (
            '{"vectors": {"": {"size": 16, "distance": "Dot"}}}',
            r"does not describe an evidra shard \(KeyError",
        ),
        ('{"vectors": {"multi": {"size": 16}, "pooled": {"size": 16}}}', r"no multi-vectors"),
        ("[" * 100_000 + "]" * 100_000, r"does not describe an evidra shard \(RecursionError"),
        (" " * (2 << 20), r"larger than"),
    ],
)
def test_a_damaged_shard_config_is_refused_in_one_line(tmp_path: Path, config: str, match: str) -> None:
    root, _ = _edge_index(tmp_path)
    (root / "qdrant" / "edge_config.json").write_text(config)
    with pytest.raises(CorpusError, match=match) as err:
        open_index(root)
    assert "\n" not in str(err.value)


def test_a_damaged_segment_is_refused_in_one_line(tmp_path: Path) -> None:
    root, _ = _edge_index(tmp_path)
    segment = next((root / "qdrant" / "segments").iterdir())
    (segment / "segment.json").write_text('{"version": "not a number"}')
    with pytest.raises(
        CorpusError, match=r"cannot open the Qdrant Edge shard at .*failed to load segment"
    ) as err:
        open_index(root)
    assert "\n" not in str(err.value)


def test_a_qdrant_client_local_mode_folder_is_not_unpickled(tmp_path: Path) -> None:
    """qdrant-client's local mode (the embedded engine of earlier builds) unpickles its storage,
    so an index folder naming one is refused before anything is read from it."""
    root, spec = _edge_index(tmp_path)
    planted = tmp_path / "local"
    planted.mkdir()
    (planted / "collection").mkdir()
    (planted / "meta.json").write_text("{}")  # what a local-mode folder would hold; never opened
    legacy = {**spec, "backend": "qdrant", "qdrant": {**spec["qdrant"], "path": str(planted)}}  # type: ignore[dict-item]
    (root / MANIFEST).write_text(json.dumps(legacy))
    with pytest.raises(CorpusError, match=r"qdrant-client local-mode folder .*no longer opens .*unpickles"):
        open_index(root)


def test_a_qdrant_url_in_a_file_gets_no_key_unless_the_user_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    from evidra.retrieval.lifecycle.manifest import IndexSpec, read_spec, write_manifest
    from evidra.retrieval.lifecycle.qdrant_build import QdrantSpec

    monkeypatch.setenv("QDRANT_API_KEY", "qk-secret")
    monkeypatch.delenv("EVIDRA_KEY_HOSTS", raising=False)
    url = "http://collector.example:6333"
    assert QdrantSpec(url=url, key_from_user=True)._api_key() == "qk-secret"  # --qdrant-url
    root = tmp_path / "idx"
    root.mkdir()
    write_manifest(
        root, IndexSpec(encoder="colqwen2", backend="qdrant", qdrant=QdrantSpec(url=url, key_from_user=True))
    )
    written = json.loads((root / "retriever.json").read_text())
    assert "key_from_user" not in written["qdrant"]  # the user's say never goes into the file
    written["qdrant"]["key_from_user"] = True  # a planted manifest claims it anyway
    (root / "retriever.json").write_text(json.dumps(written))
    spec = read_spec(root).qdrant
    assert spec is not None and spec.url == url and spec._api_key() is None  # withheld
    monkeypatch.setenv("EVIDRA_KEY_HOSTS", "QDRANT_API_KEY@collector.example:6333")
    assert spec._api_key() == "qk-secret"  # the user's own environment allows this pair


@pytest.mark.parametrize(
    ("qdrant", "match"),
    [
        (["http://x:6333"], "the Qdrant spec is a list, not an object"),
        ({"url": "http://x:6333", "candidates": "many"}, "'candidates' is a string, not an integer"),
        ({"path": "qdrant", "pooling": "median"}, "pooling 'median'"),
        ({"path": "qdrant", "shards": 2}, r"unknown keys \['shards'\]"),
    ],
)
def test_a_qdrant_spec_of_other_kinds_is_one_line(tmp_path: Path, qdrant: object, match: str) -> None:
    from evidra.retrieval.lifecycle.manifest import IndexSpec, read_spec, write_manifest
    from evidra.retrieval.lifecycle.qdrant_build import STAGING_NOTE, drop_noted

    root = tmp_path / "idx"
    root.mkdir()
    write_manifest(
        root, IndexSpec(encoder="colqwen2", backend="qdrant-edge", qdrant=QdrantSpec(path="qdrant"))
    )
    written = json.loads((root / MANIFEST).read_text())
    written["qdrant"] = qdrant
    (root / MANIFEST).write_text(json.dumps(written))
    with pytest.raises(CorpusError, match=rf"is malformed \(.*{match}.*\); rebuild the index"):
        read_spec(root)
    (tmp_path / STAGING_NOTE).write_text(json.dumps(qdrant))  # a staging note is only logged
    drop_noted(tmp_path)
