from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from index_faults import STAND_IN_URL, encoder_factories, serve_locally

from evidra.cli.main import main
from evidra.core.errors import CorpusError, InvalidInputError, MissingDependencyError
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex
from evidra.retrieval.index.qdrant import QdrantIndex
from evidra.retrieval.index.qdrant_edge import EdgeQdrantIndex
from evidra.retrieval.interfaces import ENCODERS
from evidra.retrieval.lifecycle.index_folder import QdrantSpec, build_index, open_index

# The two engines that run Qdrant without a server: Qdrant Edge (what index folders use) and
# qdrant-client's local mode (the stand-in for a server); every test below runs on both.
ENGINES = ("edge", "client")


@pytest.fixture(params=ENGINES)
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """``make(dim, **options)``: a new, empty Qdrant index on the engine of this run."""
    module = {"edge": "qdrant_edge", "client": "qdrant_client"}[request.param]
    pytest.importorskip(module)
    made: list[Any] = []

    def new(dim: int, **options: Any) -> Any:
        if request.param == "edge":
            index: Any = EdgeQdrantIndex.create(tmp_path / f"shard{len(made)}", dim, **options)
        else:
            index = QdrantIndex.connect(dim, location=":memory:", **options)
        made.append(index)
        return index

    yield new
    for index in made:
        index.close()


@pytest.mark.parametrize(
    ("module", "open_it"),
    [
        ("qdrant_client", lambda tmp: QdrantIndex.connect(8, location=":memory:")),
        ("qdrant_edge", lambda tmp: EdgeQdrantIndex.create(tmp / "shard", 8)),
    ],
)
def test_a_missing_engine_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, module: str, open_it: Any
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == module else real(n, *a))
    with pytest.raises(MissingDependencyError, match=rf"'{module}'.*evidra\[qdrant\]"):
        open_it(tmp_path)


DIM = 16


def _unit(*shape: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.nn.functional.normalize(torch.randn(*shape, generator=g), dim=-1)


@pytest.fixture()
def pages() -> dict[str, torch.Tensor]:
    return {f"p{i:02d}": _unit(4 + i % 7, DIM, seed=i) for i in range(24)}


def test_qdrant_matches_exact_store(pages: dict[str, torch.Tensor], tmp_path: Path, make: Any) -> None:
    qd = make(DIM, candidates=0)  # exhaustive MaxSim
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
        # Qdrant's engine rounds the query to fp16 against fp16 vectors: ~1e-4 of the score
        assert [h.score for h in g] == pytest.approx([h.score for h in w], rel=3e-4)
        assert g[0].image_path == f"{g[0].page_id}.png"
    even = qd.search(queries[:1], k=30, where={"doc": "even"})[0]
    assert len(even) == 12 and all(int(h.page_id[1:]) % 2 == 0 for h in even)
    both = qd.search(queries[:1], k=30, exclude=[{"p02", "p03"}], where={"doc": "even"})[0]
    assert {h.page_id for h in both} == {h.page_id for h in even} - {"p02"}
    with pytest.raises(InvalidInputError, match="where 'doc'"):
        qd.search(queries[:1], where={"doc": 1.5})
    assert len(qd) == 24 and "p05" in qd and qd.delete(["p05", "nope"]) == 1 and "p05" not in qd
    qd.update(["p06"], [_unit(3, DIM, seed=7)])
    assert len(qd) == 23 and qd.page_ids()[:3] == ["p00", "p01", "p02"]
    with pytest.raises(Exception, match="update"):
        qd.add(["p06"], [_unit(3, DIM, seed=7)])


def test_qdrant_prefetch_then_rerank_finds_planted_pages(pages: dict[str, torch.Tensor], make: Any) -> None:
    qd = make(DIM, pool_factor=2, candidates=8)
    qd.add(list(pages), list(pages.values()))
    for i in (1, 9, 17):
        gold = f"p{i:02d}"
        q = pages[gold][:3] + 0.05 * _unit(3, DIM, seed=50 + i)
        hits = qd.search([q], k=3)[0]
        assert hits[0].page_id == gold


def _search(
    index: Path, questions: list[str], capsys: pytest.CaptureFixture[str]
) -> list[list[dict[str, Any]]]:
    capsys.readouterr()
    assert main(["index", "search", "--index", str(index), "-k", "3", "--json", *questions]) == 0
    return [json.loads(line)["hits"] for line in capsys.readouterr().out.splitlines()]


@pytest.mark.parametrize("where", ["edge", "server"])
def test_cli_qdrant_backend_serves_every_index_command(
    synth_store: tuple[Path, Any],
    tiny_dirs: dict[str, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    where: str,
) -> None:
    """Without --qdrant-url the vectors go to a Qdrant Edge shard in the index folder; with one,
    to a server (qdrant-client's local mode stands in for it)."""
    server = ["--qdrant-url", STAND_IN_URL] if where == "server" else []
    if server:
        qdrant_client = pytest.importorskip("qdrant_client")
        monkeypatch.setattr(qdrant_client, "QdrantClient", serve_locally(tmp_path / "server"))
    else:
        pytest.importorskip("qdrant_edge")
    store, corpus = synth_store
    monkeypatch.setenv("QDRANT_API_KEY", "s3cret-key")
    build = [
        "index",
        "build",
        "--store",
        str(store),
        "--encoder",
        "colqwen2",
        "--model",
        str(tiny_dirs["colqwen2"]),
    ]
    assert main([*build, "--out", str(tmp_path / "exact")]) == 0
    assert (
        main([*build, "--out", str(tmp_path / "qd"), "--backend", "qdrant", "--prefetch", "0", *server]) == 0
    )
    manifest = (tmp_path / "qd" / "retriever.json").read_text()
    spec = json.loads(manifest)
    assert "s3cret" not in manifest  # the key is read from the environment, never stored
    assert spec["backend"] == ("qdrant" if server else "qdrant-edge") and spec["dim"] > 0
    if not server:
        assert (
            spec["qdrant"]["path"] == "qdrant" and (tmp_path / "qd" / "qdrant" / "edge_config.json").is_file()
        )

    # exhaustive Qdrant MaxSim ranks like the exact fp16 store built from the same pages
    questions = [q.question for q in corpus.questions[:4]]
    got, want = _search(tmp_path / "qd", questions, capsys), _search(tmp_path / "exact", questions, capsys)
    for g, w in zip(got, want, strict=True):
        assert [h["page_id"] for h in g] == [h["page_id"] for h in w]
        assert [h["score"] for h in g] == pytest.approx([h["score"] for h in w], abs=2e-2)
        assert g[0]["image_path"] == w[0]["image_path"] != ""

    victim = got[0][0]["page_id"]
    assert main(["index", "delete", "--index", str(tmp_path / "qd"), victim]) == 0
    with open_index(tmp_path / "qd") as engine:
        assert victim not in engine.index.page_ids()
        n_pages = len(engine.index)
    assert main(["index", "add", "--index", str(tmp_path / "qd"), "--store", str(store)]) == 0
    with open_index(tmp_path / "qd") as engine:
        assert victim in engine.index.page_ids() and len(engine.index) == n_pages + 1

    queries, qrels = tmp_path / "queries.jsonl", tmp_path / "qrels.tsv"
    judged = [q for q in corpus.questions if q.page_id]
    queries.write_text("".join(json.dumps({"_id": q.id, "text": q.question}) + "\n" for q in judged))
    qrels.write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q.id}\t{q.page_id}\t1\n" for q in judged))
    metrics = []
    for name in ("qd", "exact"):
        capsys.readouterr()
        args = [
            "index",
            "eval",
            "--index",
            str(tmp_path / name),
            "--queries",
            str(queries),
            "--qrels",
            str(qrels),
        ]
        assert main([*args, "--json", "-k", "1", "5"]) == 0
        metrics.append(json.loads(capsys.readouterr().out))
    # same pages found; the tiny encoder's near-tied scores (fp16 matmul here, fp32 in Qdrant) may
    # swap two neighbours, which moves MRR/nDCG by at most a few thousandths
    assert {k: v for k, v in metrics[0].items() if "recall" in k or "n_" in k} == {
        k: v for k, v in metrics[1].items() if "recall" in k or "n_" in k
    }
    assert metrics[0] == pytest.approx(metrics[1], abs=0.01)
    if server:
        _server_refusals(tmp_path, spec, [*build, "--backend", "qdrant", *server], capsys)
    else:
        _edge_refusals(tmp_path, spec, capsys)


def _error(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()
    assert main(args) == 2
    err = capsys.readouterr().err  # a build's model loading may print progress first
    assert "Traceback" not in err and err.splitlines()[-1].startswith("evidra index"), err
    return err.splitlines()[-1]


def _server_refusals(
    tmp_path: Path, spec: dict[str, Any], build: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    # a second build into the same, now non-empty, collection is refused instead of mixing pages
    assert "already holds" in _error([*build, "--out", str(tmp_path / "again")], capsys)
    # a manifest naming a collection that is not there: a one-line error, nothing created
    spec["qdrant"]["collection"] = "gone"
    (tmp_path / "qd" / "retriever.json").write_text(json.dumps(spec))
    assert "'gone' not found" in _error(["index", "search", "--index", str(tmp_path / "qd"), "hello"], capsys)
    with QdrantIndex.connect(spec["dim"], url=STAND_IN_URL, collection="evidra_pages") as qd:
        assert not qd.client.collection_exists("gone")


def _edge_refusals(tmp_path: Path, spec: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    search = ["index", "search", "--index", str(tmp_path / "qd"), "hello"]
    for name, message in [
        ("gone", "no Qdrant Edge shard at"),
        ("../exact", "not a folder inside"),
        (str(tmp_path / "qd" / "qdrant"), "not a folder inside"),  # absolute, even where it exists
    ]:
        (tmp_path / "qd" / "retriever.json").write_text(
            json.dumps({**spec, "qdrant": {**spec["qdrant"], "path": name}})
        )
        assert message in _error(search, capsys)
    assert not (tmp_path / "qd" / "gone").exists()  # nothing created


def test_cli_qdrant_options_are_checked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, factory in encoder_factories().items():
        monkeypatch.setitem(ENCODERS._items, name, factory)
    out = ["index", "build", "--store", str(tmp_path), "--out", str(tmp_path / "i"), "--encoder", "colqwen2"]
    assert main([*out, "--qdrant-url", "http://h:6333"]) == 2
    assert "--backend qdrant" in capsys.readouterr().err
    with pytest.raises(InvalidInputError, match=r"colqwen2"):
        build_index([], tmp_path / "b", "bm25", qdrant=QdrantSpec(path="qdrant"))
    with pytest.raises(InvalidInputError, match="exactly one"):
        QdrantSpec(url="http://h:6333", path="d")
    with pytest.raises(CorpusError, match="not a folder inside"):  # the shard stays in the index folder
        build_index([], tmp_path / "c", "hash-multi", "hash", qdrant=QdrantSpec(path=str(tmp_path / "q")))


def test_qdrant_clustered_prefetch_keeps_planted_pages_that_mean_pooling_loses(
    document_pages: Any, make: Any
) -> None:
    n, length, dim = 120, 64, 128
    pages, _ = document_pages(n, length, dim, seed=1)
    ids = [f"p{i:03d}" for i in range(n)]
    g = torch.Generator().manual_seed(7)
    gold = torch.randint(n, (40,), generator=g).tolist()
    queries = [  # noisy copies of random patches of the gold page, blank ones included
        torch.nn.functional.normalize(
            pages[p][torch.randint(length, (8,), generator=g)] + 0.08 * torch.randn(8, dim, generator=g),
            dim=-1,
        )
        for p in gold
    ]
    found = {}
    for pooling in ("mean", "clustered"):
        qd = make(dim, candidates=6, pooling=pooling)
        qd.add(ids, pages)
        hits = qd.search(queries, k=3)
        found[pooling] = (
            sum(ids[p] in [h.page_id for h in row] for p, row in zip(gold, hits, strict=True)) / 40
        )
    assert found["clustered"] >= 0.95 and found["clustered"] >= found["mean"] + 0.05, found
    with pytest.raises(InvalidInputError, match="pooling"):
        make(dim, pooling="median")


def test_qdrant_refuses_foreign_and_wrong_dimension_collections(tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    qd = QdrantIndex.connect(DIM, path=str(tmp_path / "qd"), collection="pages")
    qd.client.create_collection(
        "other", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.DOT)
    )
    qd.close()
    with pytest.raises(CorpusError, match=r"holds 16-d vectors, not 8-d"):
        QdrantIndex.connect(8, path=str(tmp_path / "qd"), collection="pages")
    with pytest.raises(CorpusError, match="not made by evidra"):
        QdrantIndex.connect(DIM, path=str(tmp_path / "qd"), collection="other")
    with QdrantIndex.connect(DIM, path=str(tmp_path / "qd"), collection="pages", create=False) as again:
        assert len(again) == 0  # the failed opens released the directory lock


def test_qdrant_refuses_a_point_without_a_page_id(tmp_path: Path) -> None:
    pytest.importorskip("qdrant_client")
    from qdrant_client import models

    with QdrantIndex.connect(DIM, location=":memory:", collection="pages") as qd:
        vectors = {"multi": [[1.0] * DIM], "pooled": [[1.0] * DIM]}
        qd.client.upsert("pages", points=[models.PointStruct(id=1, vector=vectors, payload={"doc": "x"})])
        with pytest.raises(CorpusError, match=r"'pages' holds a point with no 'page_id'"):
            qd.page_ids()
