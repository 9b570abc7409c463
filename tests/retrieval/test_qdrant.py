from __future__ import annotations

from pathlib import Path

import pytest
import torch

from evidra.errors import MissingDependencyError
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.index.qdrant import QdrantIndex


def test_missing_qdrant_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "qdrant_client" else real(n, *a)
    )
    with pytest.raises(MissingDependencyError, match=r"evidra\[qdrant\]"):
        QdrantIndex.connect(8, location=":memory:")


DIM = 16


def _unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)


@pytest.fixture()
def pages() -> dict[str, torch.Tensor]:
    pytest.importorskip("qdrant_client")
    return {f"p{i:02d}": _unit(4 + i % 7, DIM, seed=i) for i in range(24)}


def test_qdrant_matches_exact_store(pages: dict[str, torch.Tensor], tmp_path: Path) -> None:
    qd = QdrantIndex.connect(DIM, location=":memory:", candidates=0)  # exhaustive MaxSim
    qd.add(
        list(pages),
        list(pages.values()),
        [f"{p}.png" for p in pages],
        payloads=[{"doc": "even" if i % 2 == 0 else "odd"} for i in range(len(pages))],
    )
    ours = MultiVectorIndex.create(
        tmp_path / "idx", DIM, options=MaxSimOptions(device="cpu", compute_dtype="float32")
    )
    ours.add(list(pages), list(pages.values()), [f"{p}.png" for p in pages])
    queries = [_unit(5, DIM, seed=100 + i) for i in range(3)]
    want = ours.search(queries, k=5, exclude=[{"p00"}, set(), {"p03", "p04"}])
    got = qd.search(queries, k=5, exclude=[{"p00"}, set(), {"p03", "p04"}])
    for g, w in zip(got, want, strict=True):
        assert [h.page_id for h in g] == [h.page_id for h in w]
        assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-4)
        assert g[0].image_path == f"{g[0].page_id}.png"
    even = qd.search(queries[:1], k=30, where={"doc": "even"})[0]
    assert len(even) == 12 and all(int(h.page_id[1:]) % 2 == 0 for h in even)
    assert len(qd) == 24 and "p05" in qd and qd.delete(["p05", "nope"]) == 1 and "p05" not in qd
    qd.update(["p06"], [_unit(3, DIM, seed=7)])
    assert len(qd) == 23 and qd.page_ids()[:3] == ["p00", "p01", "p02"]
    with pytest.raises(Exception, match="update"):
        qd.add(["p06"], [_unit(3, DIM, seed=7)])


def test_qdrant_prefetch_then_rerank_finds_planted_pages(
    pages: dict[str, torch.Tensor], tmp_path: Path
) -> None:
    qd = QdrantIndex.connect(DIM, path=str(tmp_path / "qd"), pool_factor=2, candidates=8)
    qd.add(list(pages), list(pages.values()))
    for i in (1, 9, 17):
        gold = f"p{i:02d}"
        q = pages[gold][:3] + 0.05 * _unit(3, DIM, seed=50 + i)
        hits = qd.search([q], k=3)[0]
        assert hits[0].page_id == gold
    qd.client.close()
