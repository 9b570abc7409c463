"""Training precision: fp32 master weights with low-precision compute, through torch autocast.

``model.dtype`` names the *compute* dtype. Updating bf16 weights in place loses most small
updates: bf16 keeps 8 bits of mantissa, so an AdamW step of lr 1e-6 on a weight of magnitude
0.01 rounds away (measured on the tiny model: one update changed 1.65% of the elements in bf16
against 77% in fp32). So:

* full fine-tuning in bf16 loads the trainable weights in fp32 (the master copy the optimizer
  updates) and runs forward and backward under ``torch.autocast(bfloat16)``; frozen parts (the
  vision tower, a KL reference) are kept in bf16, since nothing updates them;
* LoRA keeps the frozen base in bf16 and the adapter in fp32 (peft's default), also computed
  under autocast;
* float16 training is refused: it needs loss scaling, and Qwen2-VL models overflow in fp16.

With FSDP2 (``run.sharding=fsdp2``) the same split is FSDP's ``MixedPrecisionPolicy``: fp32
sharded parameters, bf16 all-gathered compute copies, fp32 gradient reduction.

Which compute dtype is fast depends on the hardware. A GPU with bf16 support runs it on its
tensor cores. A CPU runs bf16 matmuls fast only with a hardware path for them (AVX-512 BF16 or
AMX): an Intel Xeon with AVX-512 but neither ran a GEMM at 40-51 GFLOP/s in bf16 against 157-235
in fp32, and on this project's GRPO step benchmark (oneDNN held to plain AVX-512 on a Xeon to
reproduce that machine) bf16 autocast made evidra's step 1.8x slower than fp32. So
``model.dtype: auto`` (``auto_dtype``) picks bfloat16 on a GPU that supports it and, on a CPU,
whichever of float32 and bfloat16 the CPU's flags and a GEMM probe choose (the same choice
``evidra.retrieval.kernels.compute_dtype`` makes for exact search, fp16 excluded): float32 on CPUs without a
bf16 hardware path. An explicit ``bfloat16`` on such a CPU is kept, with a warning.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, cast

from evidra.core.errors import ConfigError
from evidra.rl.run_config import ModelConfig

if TYPE_CHECKING:
    import torch

    from evidra.retrieval.kernels.compute_dtype import CpuFeatures, Rates

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Precision:
    """How a policy is stored and computed: ``load`` dtype of its weights, ``compute`` dtype."""

    load: str  # dtype the checkpoint is loaded in: float32 master weights for full fine-tuning
    compute: str  # float32 or bfloat16

    @property
    def mixed(self) -> bool:
        return self.compute != "float32"

    @contextmanager
    def autocast(self, device: torch.device | str) -> Iterator[None]:
        """Run the enclosed forward (and its backward) in the compute dtype where it is lower."""
        import torch

        device_type = torch.device(device).type
        dtype = getattr(torch, self.compute)
        with torch.autocast(device_type=device_type, dtype=dtype, enabled=self.mixed):
            yield

    def cast_frozen(self, model: torch.nn.Module) -> int:
        """Store the frozen floating-point parameters of ``model`` in the compute dtype; returns
        how many were cast. The trainable ones stay fp32 (the master copy)."""
        if not self.mixed:
            return 0
        import torch

        dtype = getattr(torch, self.compute)
        count = 0
        for param in model.parameters():
            if not param.requires_grad and param.is_floating_point() and param.dtype != dtype:
                param.data = param.data.to(dtype)
                count += 1
        return count


Dtype = Literal["float32", "bfloat16"]


def auto_dtype(
    device: torch.device | str,
    *,
    features: CpuFeatures | None = None,
    probe: Callable[[torch.device], Rates] | None = None,
) -> Dtype:
    """The compute dtype ``model.dtype: auto`` stands for on ``device`` (a name or torch device).

    ``features`` (``compute.CpuFeatures``) and ``probe`` (device -> GEMM rates) replace this
    machine's CPU flags and measured rates; by default ``evidra.retrieval.kernels.compute_dtype`` reads them.
    """
    import torch

    from evidra.retrieval.kernels import compute_dtype as compute

    dev = torch.device(device)
    if dev.type == "cuda":
        return "bfloat16" if torch.cuda.is_bf16_supported() else "float32"
    if dev.type != "cpu":
        return "float32"
    return cast(Dtype, compute.resolve("auto", dev, probe, exclude=("float16",), features=features))


def default_device() -> str:
    """Where a run without an accelerator of its own trains: the GPU if there is one."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_model_dtype(cfg: ModelConfig, device: torch.device | str) -> ModelConfig:
    """``cfg`` with ``dtype: auto`` replaced by ``auto_dtype(device)``; an explicit bfloat16 on a
    CPU without a bf16 hardware path is kept, with a warning that names the faster choice."""
    import torch

    from evidra.retrieval.kernels import compute_dtype as compute

    dev = torch.device(device)
    if cfg.dtype == "auto":
        chosen = auto_dtype(dev)
        logger.info("model.dtype=auto: computing in %s on %s", chosen, dev)
        return replace(cfg, dtype=chosen)
    if cfg.dtype == "bfloat16" and dev.type == "cpu" and "bfloat16" not in compute.candidates(dev):
        logger.warning(
            "model.dtype=bfloat16 on a CPU without a bf16 hardware path (%s): bf16 matmuls run several "
            "times slower than fp32 here; set model.dtype=auto or float32",
            compute.cpu_features().summary(),
        )
    return cfg


def training_precision(cfg: ModelConfig, device: torch.device | str | None = None) -> Precision:
    """The precision a training run uses for ``cfg`` (see the module docstring); ``dtype: auto``
    resolves for ``device`` (default: ``default_device()``)."""
    if cfg.dtype == "auto":
        cfg = replace(cfg, dtype=auto_dtype(device if device is not None else default_device()))
    if cfg.dtype == "float16":
        raise ConfigError(
            "model.dtype=float16 is not supported for training (it needs loss scaling and Qwen-VL "
            "overflows in fp16); use bfloat16, or float32 on hardware without bf16"
        )
    if cfg.dtype == "float32":
        return Precision(load="float32", compute="float32")
    if cfg.lora.enabled:  # the base is frozen: bf16 storage; peft keeps the adapter in fp32
        return Precision(load=cfg.dtype, compute=cfg.dtype)
    return Precision(load="float32", compute=cfg.dtype)


def reference_copy(model: torch.nn.Module, precision: Precision) -> torch.nn.Module:
    """A frozen copy of ``model`` for the KL term, stored in the compute dtype."""
    import copy

    import torch

    frozen = copy.deepcopy(model).eval()
    for p in frozen.parameters():
        p.requires_grad_(False)
    if precision.mixed:
        frozen.to(getattr(torch, precision.compute))
    return frozen
