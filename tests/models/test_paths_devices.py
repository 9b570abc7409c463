"""A path that does not exist is a missing directory, never a hub id; ``cuda`` without CUDA is one
line; runs record absolute base-model paths and export finds the base beside a moved run."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from evidra.cli.main import main
from evidra.core.devices import resolve_device
from evidra.core.errors import InvalidInputError, ModelLoadError
from evidra.models.references import looks_like_hub_id, looks_like_path, recorded_ref, resolve_model_ref
from evidra.rl.runs.export import relocated


def test_a_mistyped_local_path_is_no_such_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt" / "tiny-vl").mkdir(parents=True)
    assert looks_like_path("ckpt/tiny-vll") and not looks_like_hub_id("ckpt/tiny-vll")
    assert looks_like_hub_id("Qwen/Qwen2.5-VL-3B-Instruct")  # no Qwen/ folder here: a hub id
    with pytest.raises(
        ModelLoadError, match=r"no model folder 'ckpt/tiny-vll' \(did you mean 'ckpt/tiny-vl'\?\)"
    ):
        resolve_model_ref("ckpt/tiny-vll")
    for path in ("./model", "../up/model", "/abs/model", "~/model"):
        with pytest.raises(ModelLoadError, match="no model folder"):
            resolve_model_ref(path)
    assert recorded_ref("ckpt/tiny-vl") == str(tmp_path / "ckpt" / "tiny-vl")


def test_cli_names_the_missing_model_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from evidra.corpus import PageStore

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ckpt").mkdir()
    PageStore.create(tmp_path / "store").close()
    assert main(["ask", "--store", "store", "--model", "ckpt/tiny-vll", "-q", "Q?"]) == 2
    err = capsys.readouterr().err
    assert (
        err == "evidra ask: error: --model: no Qwen-VL model folder 'ckpt/tiny-vll'; pass an existing "
        "checkpoint folder (with config.json), a hub id (org/name[@revision]) or tiny:ARCH\n"
    )


def test_cuda_without_cuda_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert resolve_device("auto") == "cpu" and resolve_device("cpu") == "cpu"
    with pytest.raises(InvalidInputError, match=r"device 'cuda:1' asked for, but .*; use --device cpu"):
        resolve_device("cuda:1")
    assert main(["index", "search", "--index", "idx", "--device", "cuda", "q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evidra index search: error: device 'cuda' asked for") and err.count("\n") == 1


def test_relocated_finds_the_base_beside_a_moved_run(tmp_path: Path) -> None:
    new = tmp_path / "new" / "proj"
    (new / "ckpt" / "base").mkdir(parents=True)
    (new / "ckpt" / "base" / "config.json").write_text("{}")
    checkpoint = new / "runs" / "lat" / "checkpoints" / "step-000001"
    checkpoint.mkdir(parents=True)
    assert relocated(str(tmp_path / "old" / "proj" / "ckpt" / "base"), checkpoint) == new / "ckpt" / "base"
    assert relocated("ckpt/base", checkpoint) == new / "ckpt" / "base"  # a relative path of an older run
    assert relocated(str(tmp_path / "old" / "elsewhere"), checkpoint) is None


@pytest.mark.slow
def test_export_after_moving_the_project(
    tmp_path: Path, tiny_dirs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    old = tmp_path / "old"
    shutil.copytree(tiny_dirs["qwen2_5_vl"], old / "ckpt" / "base")
    monkeypatch.chdir(old)
    argv = [
        "-q",
        "train",
        "sft",
        "model.path=ckpt/base",
        "run.steps=1",
        "run.batch_size=2",
        "data.task=toy.key_value",
        "data.size=2",
        "run.output_dir=runs/sft",
    ]
    assert main(argv) == 0
    saved = yaml.safe_load((old / "runs" / "sft" / "config.yaml").read_text())
    assert saved["model"]["path"] == str(old / "ckpt" / "base")  # absolute: valid from any directory
    shutil.move(old, tmp_path / "moved")
    monkeypatch.chdir(tmp_path)
    assert main(["-q", "export", "moved/runs/sft", "exported"]) == 0
    assert (tmp_path / "exported" / "config.json").is_file()
