"""``evidra index build --corpus`` / ``index eval --benchmark`` on tiny benchmark folders."""

from __future__ import annotations

import base64
import io
import json
import shutil
from pathlib import Path

import pytest
from PIL import Image, ImageDraw

from evidra.cli.main import main
from evidra.eval.retrieval import detect_layout, evaluate, load_qrels, load_queries
from evidra.retrieval.lifecycle.index_folder import open_index, open_store_only

FIX = Path(__file__).parents[1] / "fixtures" / "benchmarks"
KS = ("1", "2", "4")  # @4 ranks all four BEIR pages: recall@4 is known by hand
# graded judgements with several relevant pages per query, so nDCG depends on the grades
BEIR_QRELS = [("q1", 10, 2), ("q1", 11, 1), ("q1", 12, 0), ("q2", 13, 1), ("q3", 11, 1), ("q3", 12, 2)]
BEIR_QUERIES = {"q1": "red square report", "q2": "blue bars chart", "q3": "green table totals"}


def _png(i: int) -> bytes:
    img = Image.new("RGB", (32, 32), (255, 255, 255))
    ImageDraw.Draw(img).rectangle((4 * i, 2, 4 * i + 12, 20), fill=(60 * i, 200 - 40 * i, 30))
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


def _jsonl(path: Path, rows: list[dict[str, object]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _beir(root: Path) -> Path:
    """ViDoRe v2's HF layout exported to JSONL: int corpus ids, inline image bytes."""
    corpus = [{"corpus-id": 10 + i, "image": {"bytes": base64.b64encode(_png(i)).decode()}} for i in range(4)]
    _jsonl(root / "corpus" / "test.jsonl", corpus)
    _jsonl(root / "queries" / "test.jsonl", [{"query-id": q, "query": t} for q, t in BEIR_QUERIES.items()])
    _jsonl(
        root / "qrels" / "test.jsonl", [{"query-id": q, "corpus-id": c, "score": s} for q, c, s in BEIR_QRELS]
    )
    return root


def _vidore_v1(root: Path) -> Path:
    """ViDoRe v1 QA rows with image paths: a repeated query over two images, a corpus-only page."""
    for i, name in enumerate(("a_1.png", "a_2.png", "b_1.png")):
        (root / "img").mkdir(parents=True, exist_ok=True)
        (root / "img" / name).write_bytes(_png(i))
    rows = [
        {"query": "What is the total?", "image": "img/a_1.png", "image_filename": "docs/a_1.png"},
        {"query": None, "image": "img/a_2.png", "image_filename": "docs/a_2.png"},
        {"query": "What is the total?", "image": "img/b_1.png", "image_filename": "docs/b_1.png"},
        {"query": "Who signed?", "image": "img/a_2.png", "image_filename": "docs/a_2.png"},
    ]
    _jsonl(root / "test.jsonl", rows)
    return root


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _build(capsys: pytest.CaptureFixture[str], corpus: Path, out: Path, model: Path) -> None:
    rc, _, err = _run(
        capsys,
        "index",
        "build",
        "--corpus",
        str(corpus),
        "--out",
        str(out),
        "--encoder",
        "colqwen2",
        "--model",
        str(model),
        "--device",
        "cpu",
    )
    assert rc == 0, err


def _eval_benchmark(capsys: pytest.CaptureFixture[str], index: Path, bench: Path) -> tuple[dict, str]:
    rc, out, err = _run(
        capsys,
        "index",
        "eval",
        "--index",
        str(index),
        "--benchmark",
        str(bench),
        "--json",
        "-k",
        *KS,
        "--device",
        "cpu",
    )
    assert rc == 0, err
    return json.loads(out), err


def test_detect_layout(tmp_path: Path) -> None:
    assert detect_layout(FIX / "beir") == detect_layout(FIX / "visrag") == "beir"  # folder / file configs
    assert detect_layout(FIX / "vidore_v1") == detect_layout(FIX / "vidore_v1" / "test.jsonl") == "vidore_v1"
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "data").mkdir()
    pq.write_table(
        pa.Table.from_pylist([{"query": "q", "image_filename": "x.png"}]), tmp_path / "data" / "t.parquet"
    )
    assert detect_layout(tmp_path) == "vidore_v1"  # read from the parquet schema


def test_beir_corpus_build_and_benchmark_eval(
    tiny_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench, index = _beir(tmp_path / "bench"), tmp_path / "idx"
    _build(capsys, bench, index, tiny_dirs["colqwen2"])
    assert sorted(open_store_only(index).page_ids()) == ["10", "11", "12", "13"]
    hit = open_index(index).retriever.search(["report"], k=1)[0][0]
    assert Path(hit.image_path).parent == (index / "images").resolve() and Path(hit.image_path).is_file()

    metrics, err = _eval_benchmark(capsys, index, bench)
    assert "warning" not in err
    # the same judgements written as plain files under other query ids
    (tmp_path / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": f"x-{q}", "text": t}) + "\n" for q, t in BEIR_QUERIES.items())
    )
    rows = "".join(f"x-{q}\t{c}\t{s}\n" for q, c, s in BEIR_QRELS)
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + rows)
    expected = evaluate(
        open_index(index).retriever,
        load_queries(tmp_path / "queries.jsonl"),
        load_qrels(tmp_path / "qrels.tsv"),
        ks=[int(k) for k in KS],
    )
    assert metrics["n_queries"] == expected.n_queries == 3
    assert metrics.keys() - {"n_queries", "n_skipped"} == expected.metrics.keys()
    for name, value in expected.metrics.items():
        assert metrics[name] == pytest.approx(value), name
    assert metrics["recall@4"] == 1.0


def test_vidore_v1_corpus_build_and_benchmark_eval(
    tiny_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench, index = _vidore_v1(tmp_path / "bench"), tmp_path / "idx"
    _build(capsys, bench, index, tiny_dirs["colqwen2"])
    assert open_store_only(index).page_ids() == ["docs/a_1.png", "docs/a_2.png", "docs/b_1.png"]
    # path cells point at existing files: the index refers to them, nothing is copied
    hits = open_index(index).retriever.search(["total"], k=3)[0]
    assert {Path(h.image_path).parent for h in hits} == {(bench / "img").resolve()}
    assert not (index / "images").exists()

    metrics, err = _eval_benchmark(capsys, index, bench)
    assert "warning" not in err
    (tmp_path / "queries.jsonl").write_text(
        json.dumps({"_id": "total", "text": "What is the total?"})
        + "\n"
        + json.dumps({"_id": "signed", "text": "Who signed?"})
    )
    (tmp_path / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\ntotal\tdocs/a_1.png\t1\ntotal\tdocs/b_1.png\t1\nsigned\tdocs/a_2.png\t1\n"
    )
    rc, out, _ = _run(
        capsys,
        "index",
        "eval",
        "--index",
        str(index),
        "--queries",
        str(tmp_path / "queries.jsonl"),
        "--qrels",
        str(tmp_path / "qrels.tsv"),
        "--json",
        "-k",
        *KS,
        "--device",
        "cpu",
    )
    assert rc == 0 and json.loads(out) == pytest.approx(metrics)
    expected = evaluate(
        open_index(index).retriever,
        load_queries(tmp_path / "queries.jsonl"),
        load_qrels(tmp_path / "qrels.tsv"),
        ks=[int(k) for k in KS],
    )
    assert metrics["n_queries"] == 2  # the repeated query counts once
    for name, value in expected.metrics.items():
        assert metrics[name] == pytest.approx(value), name


def test_eval_warns_when_qrels_name_pages_the_index_lacks(
    tiny_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bench, index = _beir(tmp_path / "bench"), tmp_path / "idx"
    _build(capsys, bench, index, tiny_dirs["colqwen2"])
    other = tmp_path / "other"
    shutil.copytree(bench, other)
    with (other / "qrels" / "test.jsonl").open("a") as fh:
        fh.write(json.dumps({"query-id": "q2", "corpus-id": 99, "score": 1}) + "\n")
        fh.write(json.dumps({"query-id": "q2", "corpus-id": 98, "score": 0}) + "\n")  # irrelevant: harmless
    clean, err = _eval_benchmark(capsys, index, bench)
    assert "warning" not in err
    skewed, err = _eval_benchmark(capsys, index, other)
    (warning,) = [line for line in err.splitlines() if "warning" in line]  # stderr also has load bars
    assert "warning: 1 relevant corpus id(s)" in warning and "99" in warning and "98" not in warning
    # q2's second relevant page can never be found: recall@4 is (1 + 1/2 + 1) / 3, not 1
    assert clean["recall@4"] == 1.0 and skewed["recall@4"] == pytest.approx(2.5 / 3)


def test_source_flags_and_unknown_layout_are_one_line_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    build = ["index", "build", "--out", str(tmp_path / "idx"), "--encoder", "bm25"]
    for extra in ([], ["--store", str(tmp_path), "--corpus", str(FIX / "beir")]):
        rc, _, err = _run(capsys, *build, *extra)
        assert rc == 2 and err.count("\n") == 1 and "--store" in err and "--corpus" in err
    odd = tmp_path / "odd"
    _jsonl(odd / "notes.jsonl", [{"title": "not a benchmark"}])
    (tmp_path / "empty").mkdir()
    for folder in (odd, tmp_path / "empty"):
        rc, _, err = _run(capsys, *build, "--corpus", str(folder))
        assert rc == 2 and err.count("\n") == 1
        assert str(folder) in err and "BEIR layout" in err and "ViDoRe v1" in err
    rc, _, err = _run(capsys, *build, "--corpus", str(FIX / "beir"))  # image-only pages, no OCR
    assert rc == 2 and "--ocr" in err and not (tmp_path / "idx" / "retriever.json").exists()
    evaluate_ = ["index", "eval", "--index", str(tmp_path / "idx")]
    rc, _, err = _run(capsys, *evaluate_, "--benchmark", str(odd))
    assert rc == 2 and str(odd) in err and "BEIR layout" in err
    rc, _, err = _run(capsys, *evaluate_, "--queries", str(tmp_path / "q.jsonl"))
    assert rc == 2 and err.count("\n") == 1 and "--benchmark" in err and "--qrels" in err
