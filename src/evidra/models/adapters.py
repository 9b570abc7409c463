"""LoRA adapters on the language model of a VLM (the vision tower stays frozen).

With LoRA the reference policy for KL is the same model with the adapter disabled, so no
second copy of the weights is ever held (see ``evidra.rl``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from evidra.models.loading import VLM

if TYPE_CHECKING:
    import torch

LM_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@dataclass(frozen=True)
class LoraSpec:
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0
    modules: tuple[str, ...] = LM_PROJECTIONS

    def target_regex(self) -> str:
        """Matches the projections of the language model only, never the vision tower.

        A VLM's decoder lives under ``...language_model.layers``; a text-only model's under
        ``model.layers`` (the vision tower's blocks are ``visual.blocks``, never matched).
        """
        return rf"(.*language_model.*|model\.layers\..*)\.({'|'.join(self.modules)})"


def apply_lora(vlm: VLM, spec: LoraSpec | None = None) -> VLM:
    """Wrap the model with a fresh LoRA adapter; only adapter weights stay trainable."""
    from peft import LoraConfig, get_peft_model

    spec = spec or LoraSpec()
    config = LoraConfig(
        r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=spec.target_regex()
    )
    return replace(vlm, model=get_peft_model(vlm.model, config))


def trainable_parameter_names(model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.requires_grad]


def merge_lora(vlm: VLM) -> VLM:
    """Fold the adapter into the base weights (for export or fast inference)."""
    return replace(vlm, model=vlm.model.merge_and_unload())


def freeze(model: torch.nn.Module, prefixes: Sequence[str]) -> int:
    """Disable gradients of parameters whose name starts with any prefix; returns how many."""
    count = 0
    for name, param in model.named_parameters():
        if name.startswith(tuple(prefixes)):
            param.requires_grad_(False)
            count += 1
    return count
