"""The trainable policy and its reference for the KL term.

With LoRA the reference is the same model with the adapter disabled, so no second copy of
the weights exists; with full fine-tuning it is a frozen copy; with KL off there is none.
``model.path`` may be a hub id (``org/name``) or ``tiny:<arch>`` (a tiny offline checkpoint built
on the fly).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.errors import ConfigError
from evidra.models.adapters import LoraSpec, apply_lora, freeze
from evidra.models.loading import VLM, load_vlm
from evidra.models.references import resolve_model_ref
from evidra.rl.parallel.precision import Precision, reference_copy, training_precision

if TYPE_CHECKING:
    from evidra.models.hf_types import HFModel
from evidra.rl.run_config import ModelConfig

logger = logging.getLogger(__name__)


def resolve_model_path(path: str, cache_dir: str | Path) -> str:
    """The directory ``model.path`` names: a local path, a hub id, or ``tiny:<arch>`` built (once)
    under ``cache_dir``."""
    if not path:
        raise ConfigError(
            "model.path is empty; give a local checkpoint directory, a hub id (org/name) or tiny:qwen2_5_vl"
        )
    return str(resolve_model_ref(path, "Qwen-VL model", tiny_cache=cache_dir))


def load_policy(
    cfg: ModelConfig, cache_dir: str | Path, device: str = "cpu", *, cast_frozen: bool = True
) -> VLM:
    """Load the policy and make only what should train trainable.

    Weights load in ``training_precision(cfg).load``: fp32 master weights for full fine-tuning
    whatever the compute dtype, with the frozen parts cast down to the compute dtype.
    """
    precision = training_precision(cfg)
    vlm = load_vlm(
        resolve_model_path(cfg.path, cache_dir),
        dtype=precision.load,
        device=device,
        min_pixels=cfg.min_pixels,
        max_pixels=cfg.max_pixels,
    )
    if cfg.lora.enabled:
        vlm = apply_lora(vlm, LoraSpec(r=cfg.lora.r, alpha=cfg.lora.alpha, dropout=cfg.lora.dropout))
    elif cfg.freeze_vision:
        frozen = freeze(vlm.model, ("model.visual.", "visual."))
        logger.info("froze %d vision-tower tensors", frozen)
    if cast_frozen and not cfg.lora.enabled:  # FSDP2 wants one dtype per sharded group: kept fp32 there
        precision.cast_frozen(vlm.model)
    if cfg.gradient_checkpointing:
        _enable_checkpointing(vlm.model)
    return vlm


def _enable_checkpointing(model: HFModel) -> None:
    """Activation checkpointing, non-reentrant: ``activation_checkpointing_enable`` from
    transformers 5.24, the deprecated ``gradient_checkpointing_enable`` before."""
    kwargs = {"use_reentrant": False}
    enable = getattr(model, "activation_checkpointing_enable", None)  # a LoRA wrapper forwards it
    if enable is not None:
        enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


@dataclass(frozen=True, eq=False)
class Reference:
    """Computes reference log-probs: adapter disabled (LoRA) or a frozen copy (full FT)."""

    model: HFModel  # the policy itself under LoRA, else a frozen copy (in the compute dtype)
    lora: bool

    @classmethod
    def build(cls, policy: VLM, lora: bool, precision: Precision | None = None) -> Reference:
        if lora:
            return cls(policy.model, True)
        return cls(reference_copy(policy.model, precision or Precision("float32", "float32")), False)

    @contextmanager
    def active(self) -> Iterator[HFModel]:
        """The model to run under ``torch.no_grad()`` for reference log-probs."""
        ctx = self.model.disable_adapter() if self.lora else nullcontext()
        with ctx:
            yield self.model
