"""Hostile or mistaken inputs on the command line end in one line on stderr (exit 2), never a
traceback: a file where a folder goes, binary or deeply nested configs and data, overrides that
are not YAML, outputs that cannot be written (checked before the work), a reader that leaves.

Each case here once ended in a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main

DEPTH = 100_000  # far past Python's recursion limit
MODEL = "model.path=tiny:qwen2_5_vl"  # a policy that exists: the model is checked before any data is read


def _one_line(capsys: pytest.CaptureFixture[str], command: str, *expected: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert re.match(rf"evidra {command}( [a-z-]+)?: error: ", err), err  # the full subcommand
    for text in expected:
        assert text in err, err
    return err


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    made = {
        "file": tmp_path / "a-file",
        "binary": tmp_path / "binary.bin",
        "binary_jsonl": tmp_path / "binary.jsonl",
        "binary_parquet": tmp_path / "binary.parquet",
        "deep_json": tmp_path / "deep.json",
        "deep_jsonl": tmp_path / "deep.jsonl",
        "deep_yaml": tmp_path / "deep.yaml",
        "cycle_yaml": tmp_path / "cycle.yaml",
        "folder": tmp_path / "folder",
    }
    made["file"].write_text("hello\n")
    noise = bytes(range(128, 256)) * 16  # no UTF-8 text starts with a continuation byte
    for key in ("binary", "binary_jsonl", "binary_parquet"):
        made[key].write_bytes(noise)
    made["deep_json"].write_text("[" * DEPTH + "]" * DEPTH)
    made["deep_jsonl"].write_text(json.dumps({"messages": 0}).replace("0", "[" * DEPTH + "]" * DEPTH) + "\n")
    made["deep_yaml"].write_text("run: " + "[" * DEPTH + "]" * DEPTH + "\n")
    made["cycle_yaml"].write_text("run: &a [*a]\n")
    made["folder"].mkdir()
    return made


@pytest.mark.parametrize(
    "command",
    [["index", "search", "--index", "{file}", "budget"], ["serve-index", "--index", "{file}"]],
    ids=["search", "serve"],
)
def test_an_index_option_naming_a_file(
    command: list[str], files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [a.format(file=files["file"]) for a in command]
    assert main(argv) == 2
    _one_line(capsys, command[0], "is a file, not an index folder", "evidra index build --out")


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("binary", "is not UTF-8 text (byte 0 is 0x80); pass a YAML recipe"),
        ("deep_yaml", "nests lists or mappings more than 32 levels deep"),
        ("cycle_yaml", "evidra reads no YAML aliases"),
        ("folder", "is a directory, not a YAML file"),
    ],
)
def test_a_config_that_is_no_recipe(
    config: str, expected: str, files: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "sft", "--config", str(files[config])]) == 2
    _one_line(capsys, "train", f"config file {str(files[config])!r}", expected)


def test_an_oversized_config_is_refused_unread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    big = tmp_path / "big.yaml"
    with big.open("wb") as fh:
        fh.truncate(1 << 34)  # 16 GiB, sparse: reading it whole would take the machine down
    assert main(["train", "rl", "--config", str(big)]) == 2
    _one_line(capsys, "train", "is larger than 1 MiB")


@pytest.mark.parametrize("value", ["[[[", "{a:", "[" * DEPTH, "'open"])
def test_an_override_that_is_no_yaml(value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train", "sft", f"run.steps={value}", f"run.output_dir={tmp_path}"]) == 2
    err = _one_line(capsys, "train", "override ", "run.steps=")
    assert "not valid YAML" in err or "levels deep" in err
    assert len(err) < 400  # a long value is cut in the message
    assert "the value is read as YAML" in err


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("binary", "is not UTF-8 text (byte 0 is 0x80)"),
        ("binary_jsonl", "line 1 is not UTF-8 text (byte 0 is 0x80)"),
        ("binary_parquet", "is not a readable parquet file"),
        ("deep_json", "nests JSON too deeply to read"),
        ("deep_jsonl", "line 1 nests JSON too deeply to read"),
        ("folder", "no .jsonl/.json/.parquet/.arrow files under"),
    ],
)
def test_eval_data_that_is_no_benchmark_file(
    data: str, expected: str, files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if data == "binary_parquet":
        pytest.importorskip("pyarrow")
    argv = [
        "eval",
        "--benchmark",
        "docvqa",
        "--data",
        str(files[data]),
        "--paradigm",
        "direct",
        "--model",
        "tiny:qwen2_5_vl",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 2
    _one_line(capsys, "eval", expected)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("binary", "line 1 is not UTF-8 text (byte 0 is 0x80)"),
        ("deep_jsonl", "line 1 nests JSON too deeply to read"),
        ("deep_json", "line 1 nests JSON too deeply to read"),
    ],
)
def test_train_data_that_is_no_trajectory_file(
    data: str, expected: str, files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["train", "sft", "--data", str(files[data]), f"run.output_dir={tmp_path / 'run'}", MODEL]
    assert main(argv) == 2
    _one_line(capsys, "train", "data.trajectories", expected)


def test_a_subset_file_that_is_binary(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "train",
        "rl",
        f"data.subset={files['binary_jsonl']}",
        f"run.output_dir={tmp_path / 'run'}",
        MODEL,
    ]
    assert main(argv) == 2
    _one_line(capsys, "train", "data.subset", "is not UTF-8 text")


def _no_model(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("the output path must be checked before any model loads")


@pytest.mark.parametrize(
    ("html", "expected"),
    [
        ("folder", "is a folder; name a file, e.g. --html {folder}/answer.html"),
        ("file/answer.html", "is a file, not a folder"),
    ],
)
def test_ask_html_that_cannot_be_written_is_refused_before_generation(
    html: str,
    expected: str,
    files: dict[str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import evidra.rag

    monkeypatch.setattr(evidra.rag.RAG, "load", _no_model)
    target = str(files[html]) if html in files else str(files["file"] / "answer.html")
    assert (
        main(
            [
                "ask",
                "--store",
                str(tmp_path / "store"),
                "--model",
                "tiny:qwen2_5_vl",
                "--html",
                target,
                "what is the budget?",
            ]
        )
        == 2
    )
    _one_line(capsys, "ask", expected.format(folder=files["folder"]))


def test_eval_out_and_train_export_naming_a_file_are_refused_first(
    files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "1",
        "--paradigm",
        "direct",
        "--model",
        "tiny:qwen2_5_vl",
        "--out",
        str(files["file"]),
    ]
    assert main(argv) == 2
    _one_line(capsys, "eval", "--out", "is a file; name a folder")
    assert not (tmp_path / "a-file").is_dir()
    run = tmp_path / "run"
    assert main(["train", "sft", "--export", str(files["file"]), f"run.output_dir={run}"]) == 2
    _one_line(capsys, "train", "--export", "is a file; name a folder")
    assert not run.exists()  # nothing trained
    assert main(["train", "sft", "--export", str(files["folder"]), f"run.output_dir={run}"]) == 2
    _one_line(capsys, "train", "exists and is not an evidra export")
    assert not run.exists()


def _store(root: Path, pages: int) -> Path:
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    docs = root / "docs"
    docs.mkdir()
    canvases = []
    for i in range(pages):
        canvas = PdfCanvas(100, 60)
        canvas.text(10, 30, f"page {i}", 8)
        canvases.append(canvas)
    (docs / "report.pdf").write_bytes(write_pdf(canvases))
    assert main(["-q", "ingest", str(docs), "--store", str(root / "store"), "--dpi", "10"]) == 0
    return root / "store"


@pytest.mark.parametrize("flags", [[], ["--json"]], ids=["table", "json"])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(
    flags: list[str], tmp_path: Path
) -> None:
    """`evidra pages S | head`: the reader leaves before (or while) the pages are printed."""
    store = _store(tmp_path, 3)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "evidra.cli.main", "pages", str(store), *flags]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before the command writes a byte
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == "", err  # as a command ended by SIGPIPE


@pytest.mark.parametrize(
    ("queries", "expected"),
    [
        ("binary", "line 1 is not UTF-8 text"),
        ("deep_jsonl", "line 1 nests JSON too deeply to read"),
        ("binary_tsv", "is not a UTF-8 table"),
    ],
)
def test_index_eval_queries_that_are_no_queries(
    queries: str, expected: str, files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "binary.tsv").write_bytes(files["binary"].read_bytes())
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tp1\t1\n")
    path = tmp_path / "binary.tsv" if queries == "binary_tsv" else files[queries]
    index = _store(tmp_path, 1).parent / "bm25"
    assert (
        main(
            [
                "-q",
                "index",
                "build",
                "--store",
                str(tmp_path / "store"),
                "--encoder",
                "bm25",
                "--out",
                str(index),
            ]
        )
        == 0
    )
    capsys.readouterr()
    argv = [
        "index",
        "eval",
        "--index",
        str(index),
        "--queries",
        str(path),
        "--qrels",
        str(tmp_path / "qrels.tsv"),
    ]
    assert main(argv) == 2
    _one_line(capsys, "index", expected)


@pytest.mark.parametrize(
    ("toolbox", "expected"), [("binary", "is not UTF-8 text"), ("deep_json", "too deeply")]
)
def test_a_toolbox_that_is_no_toolbox(
    toolbox: str, expected: str, files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "1",
        "--paradigm",
        "toolchain",
        "--toolbox",
        str(files[toolbox]),
        "--model",
        "tiny:qwen2_5_vl",
        "--out",
        str(tmp_path / "out"),
    ]
    assert main(argv) == 2
    _one_line(capsys, "eval", f"toolbox {str(files[toolbox])!r}", expected)
