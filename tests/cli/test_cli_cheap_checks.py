"""A model reference is checked before any work, and a failed command creates nothing.

``ckpt/x`` with no ``ckpt/`` folder here is "no model folder 'ckpt/x'" in one line: never a
download (offline, the hub cache is all there is; online, only the hub's metadata is asked for,
and a hub out of reach is said in the same line). ``ask``, ``eval``, ``index build``, ``train``,
``data filter`` and the Python API check it before a page is ingested, a sample drawn or an
output folder made: the folder the command ran in lists the same files before and after."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.errors import ModelLoadError
from evidra.models import references

ROOT = Path(__file__).resolve().parents[2]


def _listing(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*")}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An empty working folder with a documents folder of one PDF; nothing may be added to it."""
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    canvas = PdfCanvas(300, 200)
    canvas.text(30, 50, "orion budget report", 14)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "report.pdf").write_bytes(write_pdf([canvas]))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(references, "download", _no_download)
    before = _listing(tmp_path)
    yield tmp_path
    assert _listing(tmp_path) == before, "a failed command left files behind"


def _no_download(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a reference that names no model must never reach a download")


def _one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


@pytest.mark.parametrize("model", ["ckpt/x", "./ckpt/x"])
def test_ask_with_no_model_folder_leaves_no_store(
    model: str, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _one_line(capsys, ["ask", "--store", "store/", "--model", model, "When?"])
    assert f"evidra ask: error: --model: no Qwen-VL model folder {model!r}" in err


def test_a_hub_out_of_reach_is_said_in_the_same_line(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Online, ``ckpt/x`` could be a hub repository: only its metadata is asked for (here of a
    loopback port nothing listens on), and the answer joins the one line."""
    from huggingface_hub import constants

    monkeypatch.setattr(references, "hub_offline", lambda: False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")
    err = _one_line(capsys, ["ask", "--store", "store/", "--model", "ckpt/x", "When?"])
    assert "--model: no Qwen-VL model folder 'ckpt/x', and the hub could not be reached" in err


TINY_LAT = str(ROOT / "configs" / "tiny" / "lat.yaml")
MISSING = "./ckpt/x"
COMMANDS = {
    "eval": [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--paradigm",
        "direct",
        "--model",
        MISSING,
        "--out",
        "out",
    ],
    "index-build": ["index", "build", "--store", "store", "--encoder", "colqwen2", "--model", MISSING],
    "train-rl": ["train", "rl", "--config", TINY_LAT, f"model.path={MISSING}", "run.output_dir=run"],
    "train-sft": ["train", "sft", "--config", TINY_LAT, f"model.path={MISSING}", "run.output_dir=run"],
    "data-filter": ["data", "filter", "--config", TINY_LAT, "--model", MISSING, "--out", "subset.jsonl"],
}
# where each command would start preparing data: reaching one fails the test
DATA_STEPS = (
    ("evidra.rl.tasks", "task_samples"),
    ("evidra.rl.trainer", "task_samples"),
    ("evidra.rl.sft.finetune", "task_samples"),
    ("evidra.eval.benchmarks", "synthetic_samples"),
    ("evidra.corpus.store.PageStore", "open"),
)


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_missing_model_is_refused_before_any_work(
    command: str, workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def no_data(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("data was prepared before the model reference was checked")

    for target, _ in DATA_STEPS:  # imported first: a module importing a patched name would keep it
        importlib.import_module(target.removesuffix(".PageStore"))
    for target, name in DATA_STEPS:
        monkeypatch.setattr(f"{target}.{name}", no_data)
    argv = COMMANDS[command] + (["--out", "idx"] if command == "index-build" else [])
    err = _one_line(capsys, argv)
    assert f" folder {MISSING!r}; pass an existing checkpoint folder" in err, err


def test_a_folder_without_config_json_is_named(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _one_line(capsys, ["train", "rl", "model.path=docs", "run.output_dir=run"])
    assert "model.path: policy model folder 'docs' holds no config.json" in err


def test_the_python_api_checks_the_model_before_ingesting(workdir: Path) -> None:
    from evidra.rag import RAG

    with pytest.raises(ModelLoadError, match=r"^no Qwen-VL model folder 'ckpt/x'"):
        RAG.from_documents("docs", model="ckpt/x", store="store")
    with pytest.raises(ModelLoadError, match=r"^no encoder checkpoint folder './enc'"):
        RAG.from_documents("docs", model="tiny:qwen2_5_vl", retriever="colqwen2", encoder_model="./enc")
    with pytest.raises(ModelLoadError, match=r"^no Qwen-VL model folder './ckpt/x'"):
        RAG.load("store", model="./ckpt/x")


def test_what_a_reference_is(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    assert references.ref_kind("ckpt") == "folder" and references.ref_kind("tiny:qwen2") == "tiny"
    assert references.ref_kind("Qwen/Qwen2.5-VL-3B-Instruct") == "hub"
    assert references.ref_kind("ckpt/x") is None  # beside a ckpt/ folder: a mistyped path
    assert references.check_model_ref("tiny:qwen2") == "tiny"
    with pytest.raises(ModelLoadError, match=r"^--model: model 'tiny:qwen9': unknown tiny architecture"):
        references.check_model_ref("tiny:qwen9", option="--model")
    assert not (tmp_path / "tiny-qwen2").exists() and os.listdir(tmp_path) == ["ckpt"]  # nothing built


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint folder that passes the cheap check but fails to load: a ColQwen2 config and
    nothing else (no processor, no weights)."""
    folder = tmp_path_factory.mktemp("foreign")
    (folder / "config.json").write_text('{"model_type": "colqwen2"}')
    return folder


@pytest.mark.parametrize(
    "argv",
    [
        [
            "index",
            "build",
            "--store",
            "{store}",
            "--encoder",
            "colqwen2",
            "--model",
            "{model}",
            "--out",
            "a/b/idx",
        ],
        [
            "eval",
            "--synthetic",
            "tunnel.chain",
            "--n",
            "1",
            "--paradigm",
            "direct",
            "--model",
            "{model}",
            "--out",
            "out",
        ],
    ],
    ids=["index-build", "eval"],
)
def test_a_model_that_fails_to_load_leaves_no_output_folder(
    argv: list[str], foreign: Path, workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The load fails after the output folder (and parents made for it) was started: all of it is
    gone again; the one line says why."""
    from evidra.corpus import PageStore

    with PageStore.create(workdir.parent / f"{workdir.name}-store") as store:
        store_root = store.root
    assert main(["-q", "ingest", "docs", "--store", str(store_root), "--dpi", "72"]) == 0
    capsys.readouterr()
    err = _one_line(capsys, [a.format(store=store_root, model=foreign) for a in argv])
    assert str(foreign) in err
