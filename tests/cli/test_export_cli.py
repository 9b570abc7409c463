"""``evidra export``, ``train ... --export`` and ``--model`` given a run or a checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.models.loading import load_vlm
from evidra.rl.runs.checkpoint import list_checkpoints

TINY_RL = [
    "model.path=tiny:qwen2_5_vl",
    "run.steps=1",
    "run.batch_size=2",
    "run.micro_batch_size=4",
    "rollout.group_size=2",
    "rollout.max_new_tokens=4",
    "data.size=4",
    "model.lora.r=4",
]


@pytest.fixture(scope="module")
def rl_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A one-step LoRA RL run trained from the CLI with ``--export``: ``(run, exported dir)``."""
    root = tmp_path_factory.mktemp("cli-export")
    run, exported = root / "run", root / "exported"
    argv = ["-q", "train", "rl", *TINY_RL, f"run.output_dir={run}", "--export", str(exported)]
    assert main(argv) == 0
    return run, exported


def test_train_rl_export_writes_the_final_checkpoint(rl_run: tuple[Path, Path]) -> None:
    run, exported = rl_run
    final = list_checkpoints(run)[-1]
    assert final.name == "step-000001"
    assert (exported / "evidra_config.yaml").read_text() == (final / "config.yaml").read_text()
    assert load_vlm(exported).arch == "qwen2_5_vl"


def test_train_sft_export_goes_through_the_same_export(tmp_path: Path) -> None:
    out, exported = tmp_path / "sft", tmp_path / "sft-model"
    argv = [
        "-q",
        "train",
        "sft",
        "model.path=tiny:qwen2_5_vl",
        "run.steps=1",
        "run.batch_size=2",
        "data.task=toy.key_value",
        "data.size=2",
        f"run.output_dir={out}",
        "--export",
        str(exported),
    ]
    assert main(argv) == 0
    final = list_checkpoints(out)[-1]
    assert (exported / "evidra_config.yaml").read_text() == (final / "config.yaml").read_text()
    assert {"config.json", "model.safetensors", "chat_template.jinja"} <= {p.name for p in exported.iterdir()}


def test_export_command_writes_a_model_or_an_adapter(
    rl_run: tuple[Path, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run, _ = rl_run
    capsys.readouterr()
    assert main(["-q", "export", str(run), str(tmp_path / "merged")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "merged")
    assert load_vlm(tmp_path / "merged").arch == "qwen2_5_vl"
    ckpt = list_checkpoints(run)[-1]
    assert main(["-q", "export", str(ckpt), str(tmp_path / "adapter"), "--adapter"]) == 0
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4
    capsys.readouterr()
    assert main(["-q", "export", str(tmp_path / "merged"), str(tmp_path / "again")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("evidra export: error:") and "\n" not in err and "neither a training run" in err


def test_eval_takes_a_run_or_a_checkpoint(rl_run: tuple[Path, Path], tmp_path: Path) -> None:
    run, _ = rl_run
    ckpt = list_checkpoints(run)[-1]
    common = [
        "-q",
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "1",
        "--paradigm",
        "direct",
        "--max-new-tokens",
        "4",
    ]
    assert main([*common, "--model", str(run), "--out", str(tmp_path / "a")]) == 0
    assert (ckpt / "hf" / "config.json").is_file()  # exported once, beside the checkpoint
    assert main([*common, "--model", str(ckpt), "--out", str(tmp_path / "b")]) == 0
    for out in ("a", "b"):
        (row,) = [json.loads(line) for line in (tmp_path / out / "results.jsonl").read_text().splitlines()]
        assert row["paradigm"] == "direct" and row["n"] == 1


def test_a_missing_model_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from PIL import Image

    Image.new("RGB", (64, 48), "white").save(tmp_path / "page.png")
    assert main(["-q", "ingest", str(tmp_path / "page.png"), "--store", str(tmp_path / "store")]) == 0
    missing = str(tmp_path / "no-such-run")
    for argv in (
        ["eval", "--synthetic", "tunnel.chain", "--n", "1", "--model", missing, "--out", str(tmp_path / "o")],
        ["ask", "--store", str(tmp_path / "store"), "--model", missing, "Q?"],
    ):
        capsys.readouterr()
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"--model: no Qwen-VL model folder {missing!r}" in err, err
    assert not (tmp_path / "o").exists()  # checked before eval prepares its data in --out
