"""Hybrid-search options of ``evidra ask`` and ``evidra index eval``: parsed into a ``Fusion``,
refused in one line when wrong (before any model or index opens), and measured by ``index eval``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.cli._fusion import fusion_from_args
from evidra.cli.main import build_parser, main
from evidra.retrieval.hybrid import Fusion

ASK = ["ask", "--store", "no-store", "--model", "tiny:qwen2_5_vl"]


def _fusion(*extra: str) -> Fusion | None:
    return fusion_from_args(build_parser().parse_args([*ASK, *extra, "Q?"]))


def test_options_become_a_fusion() -> None:
    two = ["--index", "a", "--index", "b"]
    assert _fusion(*two) is None  # nothing said: attach's default
    assert _fusion(*two, "--fusion", "rrf", "--rrf-k", "10") == Fusion("rrf", 100, None, 10)
    weighted = _fusion(*two, "--fusion-weight", "1", "--fusion-weight", "0.5", "--fusion-depth", "20")
    assert weighted == Fusion("zscore", 20, (1.0, 0.5), 60)
    assert _fusion(*two, "--fusion", "minmax") == Fusion("minmax")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--index", "a", "--fusion", "rrf"], ["--fusion apply to two or more --index (got 1)"]),
        (["--rrf-k", "5"], ["--rrf-k apply to two or more --index (got 0)"]),
        (["--index", "a", "--index", "b", "--rrf-k", "5"], ["--rrf-k is the constant of --fusion rrf"]),
        (["--index", "a", "--index", "b", "--fusion-weight", "1"], ["got 1 --fusion-weight for 2 --index"]),
        (["--index", "a", "--index", "b", "--fusion-depth", "0"], ["fusion depth must be", "got 0"]),
        (["--index", "a", "--index", "b", "--fusion", "rrf", "--rrf-k", "-1"], ["RRF k must be", "-1"]),
        (["--index", "a", "--index", "b", "--fusion-weight", "1", "--fusion-weight", "-2"], [">= 0"]),
    ],
)
def test_bad_options_get_one_line(
    extra: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*ASK, *extra, "Q?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("evidra ask: error: "), err
    assert all(w in err for w in words), err


def test_an_unknown_rule_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*ASK, "--index", "a", "--index", "b", "--fusion", "zscroe", "Q?"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--fusion: invalid choice: 'zscroe'" in last and "'zscore'" in last


def test_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for shown in ("(default: zscore)", "(default: 100)", "(default: 1 each)", "(default: 60)"):
        assert shown in out


@pytest.fixture(scope="module")
def two_indexes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A three-page store with two BM25 indexes of it (stop words dropped; plain words), and
    queries and qrels for them."""
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    root = tmp_path_factory.mktemp("fusion")
    canvases = []
    for text in ("the orion budget report", "whale migration notes of the year", "orion whale census"):
        canvases.append(PdfCanvas(300, 200))
        canvases[-1].text(30, 50, text, 14)
    (root / "docs").mkdir()
    (root / "docs" / "a.pdf").write_bytes(write_pdf(canvases))
    assert main(["-q", "ingest", str(root / "docs"), "--store", str(root / "store"), "--dpi", "36"]) == 0
    build = ["-q", "index", "build", "--store", str(root / "store"), "--encoder", "bm25", "--out"]
    assert main([*build, str(root / "stop")]) == 0
    assert main([*build, str(root / "plain"), "--language", "none"]) == 0
    queries = {"q1": "the orion whale", "q2": "the budget of the year", "q3": "migration"}
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in queries.items())
    )
    return root


def test_index_eval_measures_a_fusion(two_indexes: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from evidra.corpus import PageStore
    from evidra.eval.retrieval import evaluate, load_queries
    from evidra.retrieval.hybrid import HybridRetriever
    from evidra.retrieval.lifecycle.index_folder import open_index

    root = two_indexes
    with PageStore.open(root / "store") as store:
        ids = store.page_ids()
    qrels = {"q1": ids[2], "q2": ids[0], "q3": ids[1]}
    (root / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{p}\t1\n" for q, p in qrels.items())
    )
    indexes = [str(root / "stop"), str(root / "plain")]
    files = [
        "--queries",
        str(root / "queries.jsonl"),
        "--qrels",
        str(root / "qrels.tsv"),
        "--json",
        "-k",
        "1",
        "3",
    ]
    fusion = Fusion("rrf", rrf_k=0, weights=(1.0, 2.0))
    options = ["--fusion", "rrf", "--rrf-k", "0", "--fusion-weight", "1", "--fusion-weight", "2"]
    capsys.readouterr()
    assert main(["-q", "index", "eval", "--index", indexes[0], "--index", indexes[1], *files, *options]) == 0
    measured = json.loads(capsys.readouterr().out)
    fused = HybridRetriever(tuple(open_index(i).retriever for i in indexes), fusion)
    expected = evaluate(
        fused, load_queries(root / "queries.jsonl"), {q: {p: 1.0} for q, p in qrels.items()}, ks=(1, 3)
    )
    assert measured["n_queries"] == 3
    assert {k: measured[k] for k in expected.metrics} == pytest.approx(expected.metrics)
    # the plain index, weighted twice, ranks "...notes of the year" first for "the budget of the year"
    assert measured["recall@1"] == pytest.approx(2 / 3)
    assert main(["-q", "index", "eval", "--index", indexes[0], *files]) == 0
    assert json.loads(capsys.readouterr().out)["recall@1"] == 1.0  # the stop-word index alone

    assert main(["-q", "index", "eval", "--index", indexes[0], *files, "--fusion", "rrf"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evidra index eval: error: --fusion apply to two or more --index (got 1)")
    assert err.endswith("pass another --index or drop --fusion") and "\n" not in err
