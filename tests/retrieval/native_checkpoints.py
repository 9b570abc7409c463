"""Write a transformers-format tiny retriever again in colpali-engine's own format.

The renames are spelled out here by hand, transformers' name -> colpali-engine's, per family and
layout ("new": the backbone's base-model class, "old": its generation class), independently of
the loader's own tables, so a wrong rule in either shows up as a failed load or a changed vector.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

INVERSE = {
    ("colqwen2", "new"): {
        "embedding_proj_layer.": "custom_text_proj.",
        "vlm.language_model.": "language_model.",
        "vlm.visual.": "visual.",
    },
    ("colqwen2", "old"): {
        "embedding_proj_layer.": "custom_text_proj.",
        "vlm.language_model.": "model.",
        "vlm.visual.": "visual.",
    },
    ("colpali", "new"): {
        "embedding_proj_layer.": "custom_text_proj.",
        "vlm.language_model.": "model.model.language_model.",
        "vlm.vision_tower.": "model.model.vision_tower.",
        "vlm.multi_modal_projector.": "model.model.multi_modal_projector.",
    },
    ("colpali", "old"): {
        "embedding_proj_layer.": "custom_text_proj.",
        "vlm.language_model.": "model.language_model.model.",
        "vlm.vision_tower.": "model.vision_tower.",
        "vlm.multi_modal_projector.": "model.multi_modal_projector.",
    },
}
# the LM head the generation classes save (tied to the embeddings); the retrieval classes have none
LM_HEAD = {
    ("colqwen2", "old"): ("lm_head.weight", "model.embed_tokens.weight"),
    ("colpali", "new"): ("model.lm_head.weight", "model.model.language_model.embed_tokens.weight"),
    ("colpali", "old"): (
        "model.language_model.lm_head.weight",
        "model.language_model.model.embed_tokens.weight",
    ),
}
NATIVE_CONFIG = {"colqwen2": ("qwen2_vl", "ColQwen2"), "colpali": ("paligemma", "ColPali")}


def native_name(key: str, family: str, layout: str) -> str:
    for hf, native in INVERSE[family, layout].items():
        if key.startswith(hf):
            return native + key[len(hf) :]
    raise KeyError(f"no colpali-engine name for {key}")


def native_state(model: Any, family: str, layout: str) -> dict[str, torch.Tensor]:
    state = {native_name(k, family, layout): v.clone() for k, v in model.state_dict().items()}
    if (family, layout) in LM_HEAD:
        head, embed = LM_HEAD[family, layout]
        state[head] = state[embed].clone()
    return state


def write_native(
    hf_dir: Path,
    model: Any,
    out: Path,
    family: str,
    layout: str,
    *,
    shards: int = 1,
    flat_config: bool = False,
) -> Path:
    """``model`` (loaded from ``hf_dir``) saved as colpali-engine would: its backbone's config with a
    Col* class, colpali-engine's weight names, the processor files of ``hf_dir``. ``flat_config``
    writes the text settings at the top level, as Qwen2-VL configs were saved before transformers 5."""
    out.mkdir(parents=True)
    for f in hf_dir.iterdir():
        if f.name not in ("config.json", "model.safetensors"):
            shutil.copy(f, out / f.name)
    model_type, cls = NATIVE_CONFIG[family]
    vlm = json.loads((hf_dir / "config.json").read_text())["vlm_config"]
    assert vlm["model_type"] == model_type
    if flat_config:
        vlm = {**vlm.pop("text_config"), **vlm, "model_type": model_type}
        rope = vlm.pop("rope_parameters")  # and the rope settings under their old names
        vlm |= {
            "rope_theta": rope["rope_theta"],
            "rope_scaling": {"type": "mrope", "mrope_section": rope["mrope_section"]},
        }
    (out / "config.json").write_text(json.dumps({**vlm, "architectures": [cls]}))
    state = native_state(model, family, layout)
    save_weights(state, out, shards)
    return out


def save_weights(state: dict[str, torch.Tensor], out: Path, shards: int = 1) -> None:
    """``state`` as ``model.safetensors``, or as ``shards`` files with the index naming them."""
    if shards == 1:
        save_file(state, str(out / "model.safetensors"))
        return
    keys = sorted(state)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = keys[i::shards]
        save_file({k: state[k] for k in part}, str(out / name))
        weight_map |= dict.fromkeys(part, name)
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))


def embeddings(encoder: Any, pages: list[Any], queries: list[str]) -> list[torch.Tensor]:
    return [*encoder.embed_pages(pages), *encoder.embed_queries(queries)]


PEFT = "base_model.model."


def write_native_adapter(
    hf_adapter: Path,
    out: Path,
    layout: str,
    base: Path,
    target_modules: str,
    modules_to_save: list[str] | None,
) -> Path:
    """A ColQwen2 adapter saved by peft under transformers' names, saved again under colpali-engine's
    (weights renamed; ``target_modules`` / ``modules_to_save`` as colpali-engine would write them)."""
    from safetensors.torch import load_file

    state = load_file(str(hf_adapter / "adapter_model.safetensors"))
    renamed = {PEFT + native_name(k.removeprefix(PEFT), "colqwen2", layout): v for k, v in state.items()}
    out.mkdir(parents=True)
    save_file(renamed, str(out / "adapter_model.safetensors"))
    cfg = json.loads((hf_adapter / "adapter_config.json").read_text())
    cfg |= {
        "target_modules": target_modules,
        "modules_to_save": modules_to_save,
        "base_model_name_or_path": str(base),
    }
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    return out
