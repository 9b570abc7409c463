"""bf16 training keeps fp32 master weights: small updates survive, as in an fp32 run."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.rl.parallel.precision import auto_dtype, resolve_model_dtype, training_precision
from evidra.rl.run_config import LoraConfig, ModelConfig, RLConfig
from evidra.rl.trainer import RLTrainer


def _trainer(out: Path, dtype: str, *extra: str) -> RLTrainer:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        f"model.dtype={dtype}",
        "run.steps=2",
        "run.batch_size=2",
        "rollout.group_size=3",
        "rollout.max_new_tokens=6",
        "optim.lr=1e-6",
        "data.size=8",
        "model.lora.enabled=false",
        "data.task=toy.length",
    ]
    return RLTrainer(load_config(RLConfig, None, [*over, *extra]))


def _trainable(trainer: RLTrainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}


def _changed_fraction(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    changed = sum(int((after[n] != before[n]).sum()) for n in before)
    return changed / sum(v.numel() for v in before.values())


def test_bf16_full_finetuning_moves_the_weights_like_fp32(tmp_path: Path) -> None:
    fractions = {}
    for dtype in ("float32", "bfloat16"):
        trainer = _trainer(tmp_path / dtype, dtype, "algo.kl=loss")
        before = _trainable(trainer)
        assert all(v.dtype == torch.float32 for v in before.values()), "master weights must be fp32"
        trainer.train()
        fractions[dtype] = _changed_fraction(before, _trainable(trainer))
        if dtype == "bfloat16":  # frozen parts and the KL reference are stored in bf16
            frozen = [p for p in trainer.vlm.model.parameters() if not p.requires_grad]
            assert frozen and all(p.dtype == torch.bfloat16 for p in frozen)
            assert trainer.reference is not None
            assert {p.dtype for p in trainer.reference.model.parameters()} == {torch.bfloat16}
    # AdamW at lr 1e-6 moves nearly every element in fp32; updating bf16 weights in place
    # rounded ~98% of them away (1.9% changed after 10 steps); fp32 masters keep them.
    assert fractions["float32"] > 0.5  # rows of unused token embeddings get no gradient
    assert fractions["bfloat16"] > 0.9 * fractions["float32"], fractions


def test_lora_in_bf16_keeps_an_fp32_adapter_on_a_bf16_base(tmp_path: Path) -> None:
    trainer = _trainer(tmp_path, "bfloat16", "model.lora.enabled=true", "run.steps=1", "optim.lr=1e-3")
    params = dict(trainer.vlm.model.named_parameters())
    trainable = {n for n, p in params.items() if p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert all(params[n].dtype == torch.float32 for n in trainable)
    assert {p.dtype for n, p in params.items() if n not in trainable} == {torch.bfloat16}
    before = _trainable(trainer)
    trainer.train()
    assert _changed_fraction(before, _trainable(trainer)) > 0.3  # lora_B starts at 0: half can move


def test_precision_choices() -> None:
    full = training_precision(ModelConfig(dtype="bfloat16", lora=ModelConfig().lora.__class__(enabled=False)))
    assert (full.load, full.compute) == ("float32", "bfloat16")
    lora = training_precision(ModelConfig(dtype="bfloat16"))
    assert (lora.load, lora.compute) == ("bfloat16", "bfloat16")
    assert not training_precision(ModelConfig()).mixed
    with pytest.raises(ConfigError, match="bfloat16"):
        training_precision(ModelConfig(dtype="float16"))


def test_gradient_checkpointing_trains_like_without(tmp_path: Path) -> None:
    """Checkpointed training has no KV cache: the update takes the plain (unshared-prompt) path."""
    deltas = []
    for flag in ("false", "true"):
        trainer = _trainer(tmp_path / flag, "float32", f"model.gradient_checkpointing={flag}", "run.steps=1")
        before = _trainable(trainer)
        (metrics,) = trainer.train()
        after = _trainable(trainer)
        deltas.append({n: after[n] - before[n] for n in before})
        assert metrics["grad_norm"] > 0
    for name, delta in deltas[0].items():
        assert torch.allclose(delta, deltas[1][name], atol=2e-6), name


def test_bf16_reports_the_sampler_trainer_mismatch(tmp_path: Path) -> None:
    """Every step reports how far the sampler's log-probs were from the trainer's (here the same
    bf16 kernels on both sides: the gap is at most rounding)."""
    (metrics,) = _trainer(tmp_path, "bfloat16", "run.steps=1").train()
    assert 0 <= metrics["mismatch/logp_abs_mean"] <= metrics["mismatch/logp_abs_max"] < 1e-2


@pytest.mark.parametrize(
    ("profile", "expected"),
    [("amx", "bfloat16"), ("avx512_bf16", "bfloat16"), ("avx512", "float32"), ("avx2", "float32")],
)
def test_auto_dtype_follows_the_cpu(cpu_profile: Any, profile: str, expected: str) -> None:
    """``model.dtype: auto`` computes in bf16 only on CPUs with a bf16 hardware path (AMX, AVX-512
    BF16); a Xeon with plain AVX-512 (bf16 GEMMs ~4x slower than fp32) or AVX2 trains in fp32."""
    cpu_profile(profile)
    assert auto_dtype("cpu") == expected
    lora_off = ModelConfig(dtype="auto", lora=LoraConfig(enabled=False))
    precision = training_precision(lora_off, "cpu")
    assert (precision.load, precision.compute) == ("float32", expected)
    assert resolve_model_dtype(lora_off, "cpu").dtype == expected


def test_auto_dtype_takes_injected_flags_and_rates() -> None:
    from evidra.retrieval.kernels.compute_dtype import PROFILES

    amx = PROFILES["amx"]
    assert auto_dtype("cpu", features=amx.features, probe=amx.probe) == "bfloat16"
    # flags with a bf16 path but a probe where bf16 is not clearly faster: the more precise fp32
    even = {"float32": 200.0, "bfloat16": 220.0}
    assert auto_dtype("cpu", features=amx.features, probe=lambda device: even) == "float32"
    assert auto_dtype("meta") == "float32"  # neither GPU nor CPU: fp32 is exact everywhere


@pytest.mark.parametrize("bf16", [True, False])
def test_auto_dtype_on_a_gpu_follows_its_bf16_support(monkeypatch: pytest.MonkeyPatch, bf16: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    assert auto_dtype("cuda") == ("bfloat16" if bf16 else "float32")
    assert auto_dtype(torch.device("cuda", 0)) == ("bfloat16" if bf16 else "float32")


@pytest.mark.parametrize(("profile", "warns"), [("avx512", True), ("avx2", True), ("amx", False)])
def test_explicit_bf16_on_a_cpu_without_bf16_hardware_warns(
    cpu_profile: Any, caplog: pytest.LogCaptureFixture, profile: str, warns: bool
) -> None:
    cpu_profile(profile)
    cfg = ModelConfig(dtype="bfloat16")
    with caplog.at_level(logging.WARNING, logger="evidra.rl.parallel.precision"):
        assert resolve_model_dtype(cfg, "cpu") is cfg  # kept as asked
    assert ("model.dtype=auto or float32" in caplog.text) is warns
    assert resolve_model_dtype(ModelConfig(dtype="float32"), "cpu").dtype == "float32"


def test_the_trainer_records_the_dtype_auto_chose(tmp_path: Path, cpu_profile: Any) -> None:
    cpu_profile("avx512")
    trainer = _trainer(tmp_path, "auto")
    assert trainer.cfg.model.dtype == "float32" and not trainer.precision.mixed
    assert "dtype: float32" in (tmp_path / "config.yaml").read_text()  # what export and resume read
