"""Mistakes a user makes on the command line end in one line naming the input and the fix.

Each case here once ended in a traceback or in a wrong result; no model is loaded by any of them.
"""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import build_parser, main
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf


def _error(capsys: pytest.CaptureFixture[str], command: str) -> str:
    """The one line the failed command printed to stderr."""
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    assert err.startswith(f"evidra {command}: error: "), err
    return err


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-page store ("orion budget report") with a BM25 index at ``<root>/bm25``."""
    root = tmp_path_factory.mktemp("errors")
    (root / "docs").mkdir()
    canvas = PdfCanvas(300, 200)
    canvas.text(30, 50, "orion budget report", 14)
    (root / "docs" / "report.pdf").write_bytes(write_pdf([canvas]))
    assert main(["-q", "ingest", str(root / "docs"), "--store", str(root / "store"), "--dpi", "72"]) == 0
    assert (
        main(
            [
                "-q",
                "index",
                "build",
                "--store",
                str(root / "store"),
                "--encoder",
                "bm25",
                "--out",
                str(root / "bm25"),
            ]
        )
        == 0
    )
    return root / "store"


def test_missing_store_hint_is_a_command_that_parses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    where = tmp_path / "my store"
    assert main(["pages", str(where)]) == 2
    err = _error(capsys, "pages")
    hint = err.split("`")[1]  # the command between backticks
    argv = shlex.split(hint.replace("<documents>", str(tmp_path)))
    args = build_parser().parse_args(argv[1:])  # argparse exits on a wrong syntax
    assert args.command == "ingest" and args.store == str(where)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("grpc", [False, True], ids=["http", "grpc"])
def test_qdrant_url_without_a_server(
    grpc: bool, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("qdrant_client")
    url = f"http://127.0.0.1:{_closed_port()}"
    model = tmp_path / "colqwen2"  # never loaded: the server is checked first
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "colqwen2"}))
    build = [
        "index",
        "build",
        "--store",
        str(store),
        "--encoder",
        "colqwen2",
        "--model",
        str(model),
        "--backend",
        "qdrant",
        "--qdrant-url",
        url,
        "--out",
        str(tmp_path / "q"),
    ]
    assert main(build + (["--grpc"] if grpc else [])) == 2
    err = _error(capsys, "index build")
    assert f"cannot reach a Qdrant server at {url}" in err and "leave --qdrant-url out" in err
    assert not (tmp_path / "q").exists()
    # an index whose manifest names the server: searching it fails the same way
    from evidra.retrieval.lifecycle.index_folder import IndexSpec, QdrantSpec
    from evidra.retrieval.lifecycle.manifest import write_manifest

    (tmp_path / "made").mkdir()
    spec = IndexSpec("colqwen2", str(model), "qdrant", qdrant=QdrantSpec(url=url, prefer_grpc=grpc), dim=8)
    write_manifest(tmp_path / "made", spec)
    assert main(["index", "search", "--index", str(tmp_path / "made"), "budget"]) == 2
    assert f"cannot reach a Qdrant server at {url}" in _error(capsys, "index search")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("q1\t{page}\t1\n", "is not a header naming the columns"),  # no header row
        ("q1 0 {page} 1\nq2 0 {page} 1\n", "is not a header naming the columns"),  # TREC, not TSV
        ("query-id,corpus-id,score\nq1,{page},1\n", "is not a header naming the columns"),  # CSV as .tsv
        ("query-id\tcorpus-id\tscore\n", "holds no judgements"),
        (
            "query-id\tcorpus-id\tscore\nq9\t{page}\t1\n",
            "no query id has qrels (query ids q1; qrels query ids q9)",
        ),
        ("query-id\tcorpus-id\tscore\nq1\t{page}\t0\n", "judge no page of the queries relevant"),
    ],
    ids=["headerless", "trec", "csv", "empty", "other-ids", "all-zero"],
)
def test_malformed_qrels_are_refused(
    text: str, expected: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["pages", str(store), "--json"])
    page = json.loads(capsys.readouterr().out.splitlines()[0])["id"]
    (tmp_path / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "orion budget"}) + "\n")
    (tmp_path / "qrels.tsv").write_text(text.format(page=page))
    queries, qrels = str(tmp_path / "queries.jsonl"), str(tmp_path / "qrels.tsv")
    command = ["index", "eval", "--index", str(store.parent / "bm25"), "--queries", queries, "--qrels", qrels]
    assert main(command) == 2
    err = _error(capsys, "index eval")
    assert "qrels.tsv" in err and expected in err
    if "header" in expected or "no judgements" in expected:
        assert "query-id<TAB>corpus-id<TAB>score" in err  # the expected format is named
    # the well-formed file is scored
    (tmp_path / "qrels.tsv").write_text(f"query-id\tcorpus-id\tscore\nq1\t{page}\t1\n")
    assert main([*command, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_queries"] == 1


def test_encoder_name_must_match_the_checkpoint(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "colpali-ckpt"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "colpali"}))
    out = tmp_path / "idx"
    assert (
        main(
            [
                "index",
                "build",
                "--store",
                str(store),
                "--encoder",
                "colqwen2",
                "--model",
                str(model),
                "--out",
                str(out),
            ]
        )
        == 2
    )
    err = _error(capsys, "index build")
    assert "'colpali' checkpoint, not colqwen2" in err and "use encoder 'colpali'" in err
    assert not (out / "retriever.json").exists()


@pytest.mark.parametrize("encoder", ["colqwen2", "dse"])
def test_an_encoder_without_its_model_is_refused(
    encoder: str, store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(["index", "build", "--store", str(store), "--encoder", encoder, "--out", str(tmp_path / "i")])
        == 2
    )
    err = _error(capsys, "index build")
    assert f"encoder {encoder!r} needs its checkpoint: pass --model with a {encoder} checkpoint" in err
    assert "config.json" not in err
    assert not (tmp_path / "i").exists()


def test_an_unknown_encoder_is_refused_before_pages_are_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert (
        main(
            [
                "index",
                "build",
                "--store",
                str(tmp_path / "none"),
                "--encoder",
                "colqwen",
                "--model",
                "m",
                "--out",
                str(tmp_path / "i"),
            ]
        )
        == 2
    )
    assert "did you mean 'colqwen2'" in _error(capsys, "index build")


@pytest.mark.parametrize(
    ("command", "kind"),
    [
        (
            ["index", "build", "--encoder", "colqwen2", "--model", "vidore/colqwen2-v1.0-hf"],
            "colqwen2 encoder",
        ),
        (
            ["index", "build", "--encoder", "colpali", "--model", "vidore/colpali-v1.3-hf"],
            "colpali encoder",
        ),
        (
            ["index", "build", "--encoder", "dse", "--model", "MrLight/dse-qwen2-2b-mrl-v1"],
            "dse encoder",
        ),
        (["ask", "--model", "Qwen/Qwen2.5-VL-3B-Instruct", "What?"], "Qwen-VL model"),
        (["train", "rl", "model.path=Qwen/Qwen2.5-VL-3B-Instruct"], "policy model"),
    ],
    ids=["colqwen2", "colpali", "dse", "ask", "train"],
)
def test_hub_ids_missing_offline_get_a_download_hint_for_their_kind_of_model(
    command: list[str],
    kind: str,
    store: Path,
    tmp_path: Path,
    hub_cache: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """HF_HUB_OFFLINE=1 and an empty hub cache: every command that loads a model names the repo,
    the cache and how to download it, in one line, checked before any page or sample is read."""
    if command[0] == "index":
        command = [*command, "--store", str(store), "--out", str(tmp_path / "i")]
    elif command[0] == "ask":
        command = [*command, "--store", str(store)]
    else:
        command = [*command, f"run.output_dir={tmp_path / 'run'}"]
    assert main(command) == 2
    err = _error(capsys, " ".join(command[:2]) if command[0] in ("index", "train") else command[0])
    hub_id = next(a.split("=")[-1] for a in command if "/" in a and not a.startswith(str(tmp_path)))
    assert f"no {kind} folder {hub_id!r}, and as a hub repository it is not in the hub cache" in err
    assert f"`hf download {hub_id}`" in err and "pass an existing checkpoint folder" in err
    assert str(hub_cache.root) in err and "build_tiny" not in err


def test_negative_steps_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "sft", "run.steps=-1", f"run.output_dir={tmp_path}"]) == 2
    assert "run.steps must be >= 0, got -1" in _error(capsys, "train sft")
