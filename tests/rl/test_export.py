"""Export of trained runs: loadable by transformers, load_vlm and peft, with the trained logits."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from evidra.core.config import load_config
from evidra.core.errors import CheckpointError, EvidraError, ModelLoadError
from evidra.models.loading import load_vlm
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.checkpoint import list_checkpoints, load_trainable_weights
from evidra.rl.runs.export import PROVENANCE, export_model, resolve_trained_model
from evidra.rl.trainer import RLTrainer

IDS = torch.tensor([[11, 57, 302, 9, 150, 77, 4, 612]])  # fixed text-only input within the tiny vocab, (1, 8)


def _logits(model: Any) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits  # (1, 8, V)


def _train(out: Path, lora: bool) -> RLTrainer:
    """One GRPO step on the toy task, then a saved checkpoint whose tensors differ from the base.

    A random tiny policy earns the same (zero) reward in every episode, so the step alone may not
    move the weights; a seeded nudge of the trainable tensors makes equal logits mean something.
    """
    cfg = load_config(
        RLConfig,
        None,
        [
            "model.path=tiny:qwen2_5_vl",
            f"run.output_dir={out}",
            "run.steps=1",
            "run.batch_size=2",
            "run.micro_batch_size=4",
            "rollout.group_size=2",
            "rollout.max_new_tokens=4",
            "data.size=4",
            f"model.lora.enabled={str(lora).lower()}",
            "model.lora.r=4",
        ],
    )
    trainer = RLTrainer(cfg)
    trainer.train()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for _, p in sorted(trainer.vlm.model.named_parameters()):
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    trainer.save()
    return trainer


@pytest.fixture(scope="module", params=["lora", "full"])
def trained(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[RLTrainer, Path]:
    out = tmp_path_factory.mktemp(f"run-{request.param}")
    return _train(out, lora=request.param == "lora"), out


def test_export_loads_in_transformers_and_load_vlm_with_the_trained_logits(
    trained: tuple[RLTrainer, Path], tmp_path: Path
) -> None:
    from transformers import AutoModelForImageTextToText, AutoTokenizer

    trainer, run = trained
    out = export_model(run, tmp_path / "model")
    want = _logits(trainer.vlm.model)
    hf = AutoModelForImageTextToText.from_pretrained(out, local_files_only=True).eval()
    torch.testing.assert_close(_logits(hf), want, atol=1e-5, rtol=1e-5)  # LoRA merged: float rounding
    vlm = load_vlm(out)
    assert vlm.arch == "qwen2_5_vl" and type(vlm.model) is type(hf)
    torch.testing.assert_close(_logits(vlm.model), want, atol=1e-5, rtol=1e-5)
    base = load_vlm(run / "models" / "tiny-qwen2_5_vl")
    assert (_logits(base.model) - want).abs().max() > 1e-3  # the export is not the base model
    # stock loaders read the processor files: no private evidra class named in them
    assert (
        json.loads((out / "preprocessor_config.json").read_text())["processor_class"] == "Qwen2_5_VLProcessor"
    )
    tok = AutoTokenizer.from_pretrained(out, local_files_only=True)
    text = tok.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True
    )
    assert text.endswith("<|im_start|>assistant\n") and (out / "chat_template.jinja").is_file()
    ckpt = list_checkpoints(run)[-1]
    assert (out / PROVENANCE).read_text() == (ckpt / "config.yaml").read_text()
    assert not list(tmp_path.glob(".tmp-*"))  # the temporary folder was renamed into place
    assert not (out / "adapter_config.json").exists()


def test_adapter_export_loads_with_peft_on_the_base(trained: tuple[RLTrainer, Path], tmp_path: Path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForImageTextToText

    trainer, run = trained
    if not trainer.cfg.model.lora.enabled:
        with pytest.raises(EvidraError, match="without LoRA") as exc:
            export_model(run, tmp_path / "adapter", adapter_only=True)
        assert "\n" not in str(exc.value) and not (tmp_path / "adapter").exists()
        return
    out = export_model(run, tmp_path / "adapter", adapter_only=True)
    assert {"adapter_config.json", "adapter_model.safetensors", PROVENANCE} <= {p.name for p in out.iterdir()}
    assert not (out / "config.json").exists()
    base_path = json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(base_path).is_absolute() and Path(base_path) == (run / "models" / "tiny-qwen2_5_vl").resolve()
    base = AutoModelForImageTextToText.from_pretrained(base_path, local_files_only=True)
    model = PeftModel.from_pretrained(base, out).eval()
    torch.testing.assert_close(_logits(model), _logits(trainer.vlm.model), atol=1e-6, rtol=1e-6)


def test_model_paths_resolve_to_a_cached_export(trained: tuple[RLTrainer, Path]) -> None:
    trainer, run = trained
    ckpt = list_checkpoints(run)[-1]
    path = Path(resolve_trained_model(run))
    assert path == ckpt / "hf" and (path / "config.json").is_file()
    stamp = (path / "config.json").stat().st_mtime_ns
    assert resolve_trained_model(ckpt) == str(path)  # reused, not written again
    assert (path / "config.json").stat().st_mtime_ns == stamp
    assert resolve_trained_model(path) == str(path)  # a model directory is returned as is
    torch.testing.assert_close(
        _logits(load_vlm(path).model), _logits(trainer.vlm.model), atol=1e-5, rtol=1e-5
    )


def test_safetensors_weights_take_precedence(trained: tuple[RLTrainer, Path], tmp_path: Path) -> None:
    from safetensors.torch import save_file

    _, run = trained
    folder = tmp_path / "step"
    shutil.copytree(list_checkpoints(run)[-1], folder, ignore=shutil.ignore_patterns("hf"))
    weights = load_trainable_weights(folder)
    assert weights and all(isinstance(v, torch.Tensor) for v in weights.values())
    save_file({k: torch.zeros_like(v) for k, v in weights.items()}, str(folder / "weights.safetensors"))
    assert all(not v.any() for v in load_trainable_weights(folder).values())
    (folder / "weights.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(CheckpointError, match="unreadable") as exc:
        load_trainable_weights(folder)
    assert "\n" not in str(exc.value) and str(folder) in str(exc.value)


def _copy_checkpoint(run: Path, dest: Path, **model: Any) -> Path:
    """A copy of the run's newest checkpoint whose config.yaml has ``model`` keys replaced."""
    shutil.copytree(list_checkpoints(run)[-1], dest, ignore=shutil.ignore_patterns("hf"))
    data = yaml.safe_load((dest / "config.yaml").read_text())
    data["model"].update(model)
    (dest / "config.yaml").write_text(yaml.safe_dump(data))
    return dest


def test_bad_sources_are_one_line_errors(trained: tuple[RLTrainer, Path], tmp_path: Path) -> None:
    trainer, run = trained
    (tmp_path / "empty-run" / "checkpoints").mkdir(parents=True)
    (tmp_path / "plain").mkdir()
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "notes.txt").write_text("mine")
    other_lora = {
        "lora": {"enabled": not trainer.cfg.model.lora.enabled, "r": 4, "alpha": 16, "dropout": 0.0}
    }
    cases = [
        (tmp_path / "nowhere", tmp_path / "o1", "does not exist"),
        (tmp_path / "plain", tmp_path / "o2", "neither a training run"),
        (tmp_path / "empty-run", tmp_path / "o3", "no complete checkpoint yet"),
        (_copy_checkpoint(run, tmp_path / "c1", path=str(tmp_path / "gone")), tmp_path / "o4", "gone"),
        (_copy_checkpoint(run, tmp_path / "c2", **other_lora), tmp_path / "o5", "model.path="),
        (run, tmp_path / "taken", "not an evidra export"),
    ]
    if trainer.cfg.model.lora.enabled:  # an adapter of another rank: every name fits, no shape does
        wider = {"lora": {"enabled": True, "r": 8, "alpha": 16, "dropout": 0.0}}
        cases.append((_copy_checkpoint(run, tmp_path / "c3", **wider), tmp_path / "o6", "has shape"))
    for source, out, needle in cases:
        with pytest.raises(EvidraError) as exc:
            export_model(source, out)
        message = str(exc.value)
        assert needle in message and "\n" not in message, message
        assert str(source) in message or str(out) in message
    assert (tmp_path / "taken" / "notes.txt").read_text() == "mine"  # never replaced
    assert not list(tmp_path.glob(".tmp-*"))
    with pytest.raises(ModelLoadError, match="base model"):
        export_model(tmp_path / "c1", tmp_path / "o4")
    with pytest.raises(EvidraError, match="neither a model directory"):
        resolve_trained_model(tmp_path / "plain")


def test_a_yaml_alias_bomb_in_a_checkpoint_config_is_refused(tmp_path: Path) -> None:
    from evidra.rl.runs.export import read_checkpoint

    ckpt = tmp_path / "step-000001"
    ckpt.mkdir()
    (ckpt / "state.json").write_text('{"step": 1, "data_epoch": 0, "data_offset": 0}')
    lines = ['a0: &a0 ["x","x","x","x","x","x","x","x","x"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    (ckpt / "config.yaml").write_text("\n".join(["model: {path: tiny:qwen2_5_vl}", *lines]))
    with pytest.raises(CheckpointError, match=r"config\.yaml is not a readable training config .*alias \*a0"):
        read_checkpoint(ckpt)
