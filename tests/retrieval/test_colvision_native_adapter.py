"""A PEFT adapter saved by colpali-engine names colpali-engine's modules (``custom_text_proj``, its
backbone's prefixes); over a base in either format it gives the vectors of the same adapter
saved under transformers' names over the transformers release."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from native_checkpoints import embeddings, write_native, write_native_adapter

from evidra.core.errors import ModelLoadError
from evidra.core.types import Page
from evidra.retrieval.encoders import load_encoder
from evidra.retrieval.encoders.colvision_native import (
    LAYOUTS,
    colpali_engine_classes,
    native_family,
    rename_adapter_config,
)
from evidra.retrieval.interfaces import EncoderOptions

QUERIES = ["founding year", "total revenue of the company"]
LM_QV = r".*language_model.*\.(q_proj|v_proj)"
# (transformers' adapter, colpali-engine's targets for the same modules)
VARIANTS = {
    # the projection trained as a full copy (modules_to_save)
    "saved": (
        {"target_modules": LM_QV, "modules_to_save": ["embedding_proj_layer"]},
        ("(.*(model).*(q_proj|v_proj).*$)", ["custom_text_proj"]),
    ),
    # LoRA on the projection too, the way colpali-engine's released adapters write it
    "lora": (
        {"target_modules": f"{LM_QV}|embedding_proj_layer"},
        ("(.*(model).*(q_proj|v_proj).*$|.*(custom_text_proj).*$)", None),
    ),
}


@pytest.fixture(scope="module")
def hf_adapters(tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The adapters of ``VARIANTS`` over the tiny ColQwen2, random non-zero weights throughout."""
    from peft import LoraConfig, get_peft_model
    from transformers import ColQwen2ForRetrieval

    root = tmp_path_factory.mktemp("hf-adapters")
    out = {}
    for variant, (kwargs, _) in VARIANTS.items():
        torch.manual_seed(1)
        base = ColQwen2ForRetrieval.from_pretrained(str(tiny_dirs["colqwen2"]), local_files_only=True)
        model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, init_lora_weights=False, **kwargs))
        if variant == "saved":  # the copy starts equal to the base's projection: move it
            copy = model.base_model.model.embedding_proj_layer.modules_to_save["default"]
            with torch.no_grad():
                copy.weight.add_(0.3 * torch.randn_like(copy.weight))
        model.save_pretrained(root / variant)
        cfg = json.loads((root / variant / "adapter_config.json").read_text())
        cfg["base_model_name_or_path"] = str(tiny_dirs["colqwen2"])
        (root / variant / "adapter_config.json").write_text(json.dumps(cfg))
        out[variant] = root / variant
    return out


@pytest.fixture(scope="module")
def native_bases(tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from transformers import ColQwen2ForRetrieval

    root = tmp_path_factory.mktemp("native-bases")
    model = ColQwen2ForRetrieval.from_pretrained(str(tiny_dirs["colqwen2"]), local_files_only=True)
    return {
        layout: write_native(tiny_dirs["colqwen2"], model, root / layout, "colqwen2", layout)
        for layout in ("new", "old")
    }


def _same_vectors(a: Any, b: Any, pages: list[Page]) -> bool:
    return all(
        torch.allclose(x, y, atol=1e-6)
        for x, y in zip(embeddings(a, pages, QUERIES), embeddings(b, pages, QUERIES), strict=True)
    )


@pytest.mark.parametrize("layout", ["new", "old"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_a_colpali_engine_adapter_over_a_colpali_engine_base(
    variant: str,
    layout: str,
    tmp_path: Path,
    tiny_dirs: dict[str, Path],
    hf_adapters: dict[str, Path],
    native_bases: dict[str, Path],
    ragged_pages: list[Page],
) -> None:
    targets, saved = VARIANTS[variant][1]
    adapter = write_native_adapter(
        hf_adapters[variant], tmp_path / "a", layout, native_bases[layout], targets, saved
    )
    native: Any = load_encoder("colqwen2", adapter, EncoderOptions(batch_size=4))
    hf: Any = load_encoder("colqwen2", hf_adapters[variant], EncoderOptions(batch_size=4))
    assert _same_vectors(native, hf, ragged_pages)
    plain: Any = load_encoder("colqwen2", tiny_dirs["colqwen2"])
    assert not torch.allclose(plain.embed_queries(QUERIES)[0], native.embed_queries(QUERIES)[0], atol=1e-3)
    assert list(adapter.iterdir()) and not (adapter / "config.json").exists()  # left as it was


def test_a_colpali_engine_adapter_over_the_transformers_release(
    tmp_path: Path, tiny_dirs: dict[str, Path], hf_adapters: dict[str, Path], ragged_pages: list[Page]
) -> None:
    targets, saved = VARIANTS["lora"][1]
    adapter = write_native_adapter(
        hf_adapters["lora"], tmp_path / "a", "old", tiny_dirs["colqwen2"], targets, saved
    )
    native: Any = load_encoder("colqwen2", adapter)
    assert _same_vectors(native, load_encoder("colqwen2", hf_adapters["lora"]), ragged_pages)


def test_adapter_targets_are_resolved_on_colpali_engine_names(tmp_path: Path) -> None:
    _, old = LAYOUTS["colqwen2"]
    lm = "vlm.language_model.layers"
    names = [
        "",
        "vlm",
        "vlm.language_model",
        "vlm.visual.blocks.0.attn.qkv",
        "embedding_proj_layer",
        "lm_head",
    ]
    names += [f"{lm}.{i}.self_attn.{p}" for i in (0, 1) for p in ("q_proj", "k_proj", "v_proj")]
    cfg = {
        "peft_type": "LORA",
        "r": 4,
        "lora_alpha": 8,
        "target_modules": ["q_proj", "v_proj"],  # suffixes, as peft matches a list
        "layers_to_transform": [1],
        "rank_pattern": {"model.layers.1.self_attn.q_proj": 16},
        "modules_to_save": ["custom_text_proj", "lm_head"],
        "base_model_name_or_path": "somewhere",
    }
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    out = rename_adapter_config(tmp_path, old, names)
    assert out["target_modules"] == [f"{lm}.1.self_attn.q_proj", f"{lm}.1.self_attn.v_proj"]
    assert out["rank_pattern"] == {re.escape(f"{lm}.1.self_attn.q_proj"): 16}
    assert out["modules_to_save"] == ["embedding_proj_layer"]  # the LM head has no place here
    assert out["layers_to_transform"] is None and out["r"] == 4


def test_a_malformed_adapter_config_is_one_line(tmp_path: Path) -> None:
    _, old = LAYOUTS["colqwen2"]
    (tmp_path / "adapter_config.json").write_text("[1, 2]")
    with pytest.raises(ModelLoadError, match=r"adapter_config\.json' is a list, not a JSON object"):
        rename_adapter_config(tmp_path, old, ["vlm"])
    cfg = {"peft_type": "LORA", "r": 4, "target_modules": ["q_proj"], "modules_to_save": ["lm_head", 3]}
    (tmp_path / "adapter_config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="modules_to_save must be a list of module names"):
        rename_adapter_config(tmp_path, old, ["vlm"])


@pytest.mark.parametrize(
    "config", [{"model_type": []}, {"model_type": {}}, {"model_type": "qwen2_vl", "architectures": 3}]
)
def test_a_config_with_odd_fields_is_no_native_checkpoint(tmp_path: Path, config: dict[str, object]) -> None:
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert native_family(tmp_path) is None and colpali_engine_classes(tmp_path) == []


def test_an_adapter_with_foreign_names_is_refused(
    tmp_path: Path, hf_adapters: dict[str, Path], native_bases: dict[str, Path]
) -> None:
    from safetensors.torch import load_file, save_file

    targets, saved = VARIANTS["lora"][1]
    odd = write_native_adapter(
        hf_adapters["lora"], tmp_path / "odd", "old", native_bases["old"], targets, saved
    )
    state = load_file(str(odd / "adapter_model.safetensors"))
    state["base_model.model.decoder.q_proj.lora_A.weight"] = torch.zeros(4, 64)
    save_file(state, str(odd / "adapter_model.safetensors"))
    with pytest.raises(
        ModelLoadError, match=r"1 weight\(s\) fit no colpali-engine colqwen2 layout \(e\.g\. decoder\.q_proj"
    ) as info:
        load_encoder("colqwen2", odd)
    assert "\n" not in str(info.value) and "odd" in str(info.value)
