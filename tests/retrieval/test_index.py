from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.retrieval.index import _shards
from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.interfaces import Hit
from evidra.retrieval.kernels.compute_dtype import PROFILES
from evidra.retrieval.kernels.maxsim import maxsim
from float_hits import assert_hits_close

DIM = 16
CPU = MaxSimOptions(device="cpu", compute_dtype="float32")


@pytest.fixture(autouse=True, params=sorted(PROFILES))
def _every_cpu(request: pytest.FixtureRequest, cpu_profile: Any) -> None:
    """Every test here runs under each CPU profile, whatever this machine is."""
    cpu_profile(request.param)


def _unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)


def _pages(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    return {f"p{i:02d}": _unit(3 + (i * 5) % 11, DIM, seed=seed + i) for i in range(n)}


def _reference(query: torch.Tensor, pages: dict[str, torch.Tensor], k: int) -> list[str]:
    # pages are stored in float16: score the rounded vectors, as the index does
    scores = {pid: float(maxsim(query, p.half().float())) for pid, p in pages.items()}
    return sorted(scores, key=lambda pid: (-scores[pid], pid))[:k]


def test_exact_search_matches_reference_and_excludes(tmp_path: Path) -> None:
    pages = _pages(20)
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    index.add(list(pages), list(pages.values()), [f"/img/{p}.png" for p in pages])
    queries = [_unit(5, DIM, seed=100 + i) for i in range(3)]
    hits = index.search(queries, k=5)
    for q, row in zip(queries, hits, strict=True):
        assert [h.page_id for h in row] == _reference(q, pages, 5)
        assert row[0].image_path == f"/img/{row[0].page_id}.png"
        assert row[0].score == pytest.approx(float(maxsim(q, pages[row[0].page_id].half().float())), abs=1e-4)
    top = hits[0][0].page_id
    skipped = index.search(queries[:1], k=5, exclude=[{top, "not-there"}])[0]
    assert top not in [h.page_id for h in skipped]
    assert [h.page_id for h in skipped] == _reference(
        queries[0], {p: v for p, v in pages.items() if p != top}, 5
    )


def test_k_larger_than_index_and_exclude_everything(tmp_path: Path) -> None:
    pages = _pages(3)
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    index.add(list(pages), list(pages.values()))
    q = [_unit(2, DIM, seed=9)]
    assert len(index.search(q, k=10)[0]) == 3
    assert index.search(q, k=10, exclude=[set(pages)]) == [[]]


def test_delete_update_and_reopen(tmp_path: Path) -> None:
    pages = _pages(12)
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    ids = list(pages)
    index.add(ids[:6], [pages[p] for p in ids[:6]])
    index.add(ids[6:], [pages[p] for p in ids[6:]])
    assert index.delete(["p03", "p07", "nope"]) == 2
    new = _unit(4, DIM, seed=999)
    index.update(["p00"], [new])
    expected = {p: v for p, v in pages.items() if p not in ("p03", "p07")} | {"p00": new}
    q = _unit(3, DIM, seed=5)
    want = _reference(q, expected, 8)
    assert [h.page_id for h in index.search([q], k=8)[0]] == want
    index.close()
    reopened = MultiVectorIndex.open(tmp_path / "idx", options=CPU)
    assert len(reopened) == 10 and "p03" not in reopened
    assert [h.page_id for h in reopened.search([q], k=8)[0]] == want
    reopened.compact()
    assert reopened.store.dead_fraction() == 0.0
    assert [h.page_id for h in reopened.search([q], k=8)[0]] == want
    assert len(list((tmp_path / "idx" / "shards").iterdir())) == 1
    with pytest.raises(InvalidInputError, match="update"):
        reopened.add(["p01"], [new])


def test_auto_compaction_after_many_deletes(tmp_path: Path) -> None:
    pages = _pages(10)
    index = MultiVectorIndex.create(
        tmp_path / "idx", DIM, options=MaxSimOptions(device="cpu", compact_at=0.5)
    )
    index.add(list(pages), list(pages.values()))
    index.delete(list(pages)[:8])
    assert index.store.dead_fraction() == 0.0  # compaction ran
    assert index.page_ids() == ["p08", "p09"]


def test_crash_mid_write_leaves_previous_index_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pages = _pages(6)
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    index.add(list(pages)[:4], list(pages.values())[:4])
    q = _unit(3, DIM, seed=1)
    before = index.search([q], k=4)

    def fail(src: str, dst: str) -> None:
        raise OSError("simulated crash during rename")

    with monkeypatch.context() as crash:  # only the crash is undone: the CPU profile stays
        crash.setattr(_shards.os, "replace", fail)
        with pytest.raises(OSError, match="simulated"):
            index.add(["p04", "p05"], [pages["p04"], pages["p05"]])
        with pytest.raises(OSError, match="simulated"):
            index.compact()
    reopened = MultiVectorIndex.open(tmp_path / "idx", options=CPU)
    assert len(reopened) == 4
    # the same pages in the same order; the scores within float summation order (float_hits)
    assert_hits_close(reopened.search([q], k=4), before)
    assert reopened.kernel == index.kernel  # the kernel the index recorded, whatever the CPU now
    assert not [p for p in (tmp_path / "idx" / "shards").iterdir() if p.name.startswith(".tmp")]


def test_crash_between_shard_and_metadata_commit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pages = _pages(4)
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    index.add(["p00", "p01"], [pages["p00"], pages["p01"]])
    real = _shards.write_array_atomic

    def write_then_die(path: Path, array: np.ndarray) -> str:
        real(path, array)  # the shard lands on disk, the transaction never runs
        raise KeyboardInterrupt

    monkeypatch.setattr(_shards, "write_array_atomic", write_then_die)
    with pytest.raises(KeyboardInterrupt):
        index.add(["p02"], [pages["p02"]])
    monkeypatch.undo()
    reopened = MultiVectorIndex.open(tmp_path / "idx", options=CPU)
    assert reopened.page_ids() == ["p00", "p01"]
    reopened.add(["p02"], [pages["p02"]])  # the orphan shard is collected, not reused
    assert reopened.page_ids() == ["p00", "p01", "p02"]
    assert len(list((tmp_path / "idx" / "shards").iterdir())) == 2


def test_loader_detects_corruption(tmp_path: Path) -> None:
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    index.add(["a"], [_unit(4, DIM, seed=0)])
    index.close()
    shard = next((tmp_path / "idx" / "shards").iterdir())
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0xFF
    shard.write_bytes(bytes(data))
    with pytest.raises(CorpusError, match="checksum"):
        MultiVectorIndex.open(tmp_path / "idx", options=CPU)
    np.save(shard, np.zeros((3, DIM), dtype=np.float16))  # wrong shape, checksum not verified
    with pytest.raises(CorpusError, match="shape"):
        MultiVectorIndex.open(tmp_path / "idx", options=MaxSimOptions(device="cpu", verify=False))
    os.remove(shard)
    with pytest.raises(CorpusError, match="missing shard"):
        MultiVectorIndex.open(tmp_path / "idx", options=CPU)


def test_bad_inputs(tmp_path: Path) -> None:
    index = MultiVectorIndex.create(tmp_path / "idx", DIM, options=CPU)
    with pytest.raises(InvalidInputError, match=r"shape \(L >= 1, 16\)"):
        index.add(["a"], [torch.ones(2, 8)])
    with pytest.raises(InvalidInputError, match="NaN"):
        index.add(["a"], [torch.full((2, DIM), float("nan"))])
    with pytest.raises(InvalidInputError, match="duplicate"):
        index.add(["a", "a"], [torch.ones(1, DIM), torch.ones(1, DIM)])
    with pytest.raises(InvalidInputError, match="k must be"):
        index.search([torch.ones(1, DIM)], k=0)
    with pytest.raises(InvalidInputError, match="one collection"):
        index.search([torch.ones(1, DIM)], k=1, exclude=[{"a"}, {"b"}])
    with pytest.raises(CorpusError, match="not an evidra index"):
        MultiVectorIndex.open(tmp_path / "nothing")


def test_pooled_prefilter_finds_planted_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # each query is a noisy copy of 4 consecutive patches of its gold page (64-d: in very few
    # dimensions a mean of 4 random vectors is mostly noise and pooling cannot work)
    n_pages, length, dim = 60, 32, 64
    pages = {f"p{i:02d}": _unit(length, dim, seed=i) for i in range(n_pages)}
    opts = MaxSimOptions(
        device="cpu", compute_dtype="float16", prefilter="pooled", pool_factor=4, candidates=10
    )
    index = MultiVectorIndex.create(tmp_path / "idx", dim, options=opts)
    index.add(list(pages), list(pages.values()))
    exact = MultiVectorIndex.open(tmp_path / "idx", options=CPU)
    assert (exact.compute_dtype, exact.storage_dtype) == ("float32", "float16")  # widened per block
    assert index.memory_bytes() * 4 == exact.memory_bytes()  # pooled x4 fewer, both held in 16 bits
    found = 0
    singles: list[list[Hit]] = []
    queries: list[torch.Tensor] = []
    for i in range(0, n_pages, 3):
        gold = f"p{i:02d}"
        q = torch.nn.functional.normalize(pages[gold][8:12] + 0.1 * _unit(4, dim, seed=500 + i), dim=-1)
        pooled_hits = index.search([q], k=5)[0]
        exact_hits = exact.search([q], k=5)[0]
        found += gold in [h.page_id for h in pooled_hits]
        # re-ranked scores are exact MaxSim scores
        assert pooled_hits[0].score == pytest.approx(exact_hits[0].score, abs=1e-2)
        singles.append(pooled_hits)
        queries.append(q)
    assert found == n_pages // 3
    # 20 queries x 10 candidates: re-ranked per query (one query alone uses the union path)
    calls: list[int] = []
    exact_rows = index._exact
    monkeypatch.setattr(
        index, "_exact", lambda qs, rows, dtype: calls.append(len(qs)) or exact_rows(qs, rows, dtype)
    )
    batched = index.search(queries, k=5)
    assert calls == [1] * 20
    assert [[h.page_id for h in r] for r in batched] == [[h.page_id for h in r] for r in singles]
    for row, single in zip(batched, singles, strict=True):
        assert [h.score for h in row] == pytest.approx([h.score for h in single], abs=1e-3)


def test_dense_index(tmp_path: Path) -> None:
    vecs = {f"d{i}": _unit(1, DIM, seed=i) for i in range(8)}
    index = DenseIndex.create(tmp_path / "dense", DIM, device="cpu")
    index.add(list(vecs), list(vecs.values()), [f"{p}.png" for p in vecs])
    q = _unit(1, DIM, seed=3)
    ref = sorted(vecs, key=lambda p: -float(q[0] @ vecs[p][0].half().float()))
    assert [h.page_id for h in index.search([q], k=3)[0]] == ref[:3]
    assert ref[0] == "d3"  # the query is page d3's own vector
    index.delete(["d3"])
    index.update(["d4"], [_unit(1, DIM, seed=40)])
    index.close()
    reopened = DenseIndex.open(tmp_path / "dense", device="cpu")
    hits = reopened.search([q], k=8, exclude=[{ref[1]}])[0]
    assert "d3" not in [h.page_id for h in hits] and ref[1] not in [h.page_id for h in hits]
    assert len(hits) == 6
    with pytest.raises(InvalidInputError, match="single-vector"):
        reopened.add(["x"], [torch.ones(2, DIM)])
    with pytest.raises(InvalidInputError, match="multi-vector"):
        DenseIndex.open(_multi(tmp_path))


def _multi(tmp_path: Path) -> Path:
    MultiVectorIndex.create(tmp_path / "m", DIM, options=CPU).close()
    return tmp_path / "m"


def test_signbit_prefilter_finds_planted_pages(tmp_path: Path) -> None:
    n_pages, length, dim = 60, 32, 64
    pages = {f"p{i:02d}": _unit(length, dim, seed=i) for i in range(n_pages)}
    opts = MaxSimOptions(device="cpu", prefilter="signbits", candidates=10)
    index = MultiVectorIndex.create(tmp_path / "idx", dim, options=opts)
    index.add(list(pages), list(pages.values()))
    exact = MultiVectorIndex.open(tmp_path / "idx", options=MaxSimOptions(device="cpu"))
    assert index.memory_bytes() * 16 == exact.memory_bytes()  # 1 bit vs 16 bits per dimension
    queries = [
        torch.nn.functional.normalize(pages[f"p{i:02d}"][8:12] + 0.1 * _unit(4, dim, seed=700 + i), dim=-1)
        for i in range(0, n_pages, 3)
    ]
    hits = index.search(queries, k=5)
    assert [r[0].page_id for r in hits] == [f"p{i:02d}" for i in range(0, n_pages, 3)]
    want = exact.search(queries, k=5)
    assert [r[0].score for r in hits] == pytest.approx([r[0].score for r in want], abs=1e-3)


def test_many_small_adds_keep_blocks_packed(tmp_path: Path) -> None:
    pages = _pages(40)
    index = MultiVectorIndex.create(
        tmp_path / "idx", DIM, options=MaxSimOptions(device="cpu", block_tokens=64)
    )
    for pid, vec in pages.items():  # one page per add: one tiny block each, until re-packed
        index.add([pid], [vec])
    index.delete(["p05"])
    tokens = sum(v.shape[0] for v in pages.values())  # 40 pages of 3..13 vectors
    assert len(index._blocks) <= 2 * -(-tokens // 64) + 8 < 40
    q = _unit(3, DIM, seed=77)
    want = _reference(q, {p: v for p, v in pages.items() if p != "p05"}, 6)
    assert [h.page_id for h in index.search([q], k=6)[0]] == want


def test_clustered_prefilter_beats_positional_pooling_on_document_like_pages(
    tmp_path: Path, document_pages: Any
) -> None:
    n, length, dim = 200, 64, 128
    pages, _ = document_pages(n, length, dim, seed=0)
    ids = [f"p{i:03d}" for i in range(n)]
    MultiVectorIndex.create(tmp_path / "idx", dim, options=CPU).add(ids, pages)
    g = torch.Generator().manual_seed(100)
    gold = torch.randint(n, (60,), generator=g).tolist()
    queries = [  # 8 noisy copies of random patches of the gold page (blank ones included)
        torch.nn.functional.normalize(
            pages[p][torch.randint(length, (8,), generator=g)] + 0.08 * torch.randn(8, dim, generator=g),
            dim=-1,
        )
        for p in gold
    ]

    def recall(prefilter: str) -> float:
        opts = MaxSimOptions(
            device="cpu", compute_dtype="float32", prefilter=prefilter, pool_factor=4, candidates=10
        )  # type: ignore[arg-type]
        hits = MultiVectorIndex.open(tmp_path / "idx", options=opts).search(queries, k=3)
        return sum(ids[p] in [h.page_id for h in row] for p, row in zip(gold, hits, strict=True)) / len(gold)

    exact, positional, clustered = recall("none"), recall("pooled"), recall("clustered")
    assert exact == 1.0 and clustered >= 0.95 and clustered >= positional + 0.05, (
        exact,
        positional,
        clustered,
    )
    index = MultiVectorIndex.open(
        tmp_path / "idx", options=MaxSimOptions(device="cpu", prefilter="clustered")
    )
    assert index.memory_bytes() == n * (length // 4) * dim * 2  # same memory as pooling x4
