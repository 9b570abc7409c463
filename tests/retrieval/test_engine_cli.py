from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.errors import InvalidInputError
from evidra.corpus import PageStore
from evidra.eval.retrieval import evaluate
from evidra.retrieval.hybrid import HybridRetriever
from evidra.retrieval.lifecycle.index_folder import build_index, open_index


def _qrels(corpus: Any, out: Path) -> tuple[Path, Path]:
    answerable = [q for q in corpus.questions if q.page_id]
    (out / "queries.jsonl").write_text(
        "\n".join(json.dumps({"_id": q.id, "text": q.question}) for q in answerable)
    )
    rows = "".join(f"{q.id}\t{q.page_id}\t1\n" for q in answerable)
    (out / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    return out / "queries.jsonl", out / "qrels.tsv"


def test_bm25_cli_build_search_eval_add_delete(
    synth_store: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, corpus = synth_store
    assert (
        main(["index", "build", "--store", str(store), "--out", str(tmp_path / "bm25"), "--encoder", "bm25"])
        == 0
    )
    q = next(q for q in corpus.questions if q.page_id)
    capsys.readouterr()
    assert main(["index", "search", "--index", str(tmp_path / "bm25"), "-k", "3", "--json", q.question]) == 0
    hits = json.loads(capsys.readouterr().out)["hits"]
    assert hits[0]["page_id"] == q.page_id and hits[0]["image_path"].endswith(".png")
    queries, qrels = _qrels(corpus, tmp_path)
    args = [
        "index",
        "eval",
        "--index",
        str(tmp_path / "bm25"),
        "--queries",
        str(queries),
        "--qrels",
        str(qrels),
    ]
    assert main([*args, "--json", "-k", "1", "5"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    # planted relevance: each question quotes its page's entity names, so BM25 finds most of them
    assert metrics["n_queries"] == sum(1 for x in corpus.questions if x.page_id)
    assert metrics["recall@5"] >= 0.9 and metrics["mrr@5"] >= metrics["recall@1"]
    assert main(["index", "delete", "--index", str(tmp_path / "bm25"), q.page_id]) == 0
    assert q.page_id not in open_index(tmp_path / "bm25").index.page_ids()
    assert main(["index", "add", "--index", str(tmp_path / "bm25"), "--store", str(store)]) == 0
    assert q.page_id in open_index(tmp_path / "bm25").index.page_ids()


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["index", "search", "--index", str(tmp_path / "none"), "hello"]) == 2
    err = capsys.readouterr().err
    assert "retriever.json" in err and err.count("\n") == 1


def test_colqwen2_engine_roundtrip_and_hybrid(
    synth_store: tuple[Path, Any], tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    store, corpus = synth_store
    pages = PageStore.open(store).pages()
    engine = build_index(pages[:4], tmp_path / "col", "colqwen2", tiny_dirs["colqwen2"])
    assert engine.spec.backend == "maxsim" and len(engine.index) == 4
    engine.add(pages[4:])
    with pytest.raises(InvalidInputError, match="already"):
        engine.add(pages[:1])
    engine.add(pages[:1], replace=True)
    assert main(["index", "delete", "--index", str(tmp_path / "col"), pages[1].id]) == 0
    again = open_index(tmp_path / "col")
    assert pages[1].id not in again.index.page_ids() and len(again.index) == len(pages) - 1
    hits = again.retriever.search(["When was the project founded?"], k=3, exclude=[{pages[0].id}])[0]
    assert len(hits) == 3 and pages[0].id not in [h.page_id for h in hits]
    direct = again.index.search(
        again.encoder.embed_queries(["When was the project founded?"]),
        k=3,  # type: ignore[union-attr]
        exclude=[{pages[0].id}],
    )
    assert direct[0] == hits
    bm25 = build_index(pages, tmp_path / "bm25", "bm25").retriever
    hybrid = HybridRetriever((again.retriever, bm25))
    queries, qrels = _qrels(corpus, tmp_path)
    from evidra.eval.retrieval import load_qrels, load_queries

    report = evaluate(hybrid, load_queries(queries), load_qrels(qrels), ks=(5,))
    assert report.n_queries > 0 and 0.0 <= report.metrics["ndcg@5"] <= 1.0


def test_dense_engine(synth_store: tuple[Path, Any], tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    store, _ = synth_store
    pages = PageStore.open(store).pages()[:3]
    engine = build_index(pages, tmp_path / "dse", "dse", tiny_dirs["qwen2_vl"])
    assert engine.spec.backend == "dense"
    assert open_index(tmp_path / "dse").retriever.search(["x"], k=5)[0][0].page_id in {p.id for p in pages}
    with pytest.raises(InvalidInputError, match="already exists"):
        build_index(pages, tmp_path / "dse", "dse", tiny_dirs["qwen2_vl"])


def test_serve_index_cli_parses_and_reports_missing_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from evidra.cli.main import build_parser

    args = build_parser().parse_args(
        ["serve-index", "--index", "i", "--max-batch", "4", "--max-wait-ms", "2"]
    )
    assert (args.max_batch, args.max_wait_ms, args.host, args.access_log) == (4, 2.0, "127.0.0.1", True)
    assert build_parser().parse_args(["serve-index", "--index", "i", "--no-access-log"]).access_log is False
    assert main(["serve-index", "--index", str(tmp_path / "missing")]) == 2
    assert "evidra index build" in capsys.readouterr().err


def test_build_overwrite_replaces_an_index(
    synth_store: tuple[Path, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store, _ = synth_store
    idx = str(tmp_path / "idx")
    build = ["-q", "index", "build", "--store", str(store), "--out", idx, "--encoder", "bm25"]
    assert main([*build, "--language", "none"]) == 0
    assert main(build) == 2
    assert "--overwrite to replace it" in capsys.readouterr().err
    (tmp_path / "idx" / "images").mkdir()  # inline benchmark images of --corpus stay
    assert main([*build, "--overwrite"]) == 0
    with open_index(idx) as engine:
        assert engine.index.params.language == "en"  # type: ignore[union-attr]
        assert len(engine.index) == len(PageStore.open(store).page_ids())
    assert (tmp_path / "idx" / "images").is_dir()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".idx.")]  # nothing left aside
    assert main([*build, "--language", "klingon"]) == 2
    assert "unknown BM25 language 'klingon'" in capsys.readouterr().err
