"""DeepSpeed ZeRO-3 (``run.sharding=zero3``): parameters, gradients and optimizer states
partitioned over processes by DeepSpeed's own engine.

``deepspeed.initialize`` is called here rather than through accelerate's DeepSpeed plugin
because accelerate enables that plugin only on accelerators (on a CPU it falls back to DDP),
while DeepSpeed itself runs ZeRO-3 on CPU processes over gloo: the same calls are tested on two
CPU processes and used on GPUs (NCCL).

Precision is DeepSpeed's: with ``model.dtype: bfloat16`` the module computes in bf16 and the
optimizer keeps fp32 master partitions (the fp32 masters start from the bf16-rounded weights,
as in every DeepSpeed bf16 run). Gradient clipping and the skip of a step whose gradient norm
is not finite happen inside ``DeepSpeedEngine.step``.

Checkpoints keep evidra's format: the whole trainable weights gathered in fp32
(``safe_get_full_fp32_param``) for export and evaluation, and each process's optimizer
partition (fp32 masters and Adam moments) as tensors and plain values, loaded with
``weights_only=True``: DeepSpeed's own ``load_checkpoint`` unpickles arbitrary objects.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from evidra.core.errors import CheckpointError, ConfigError
from evidra.rl.parallel.precision import Precision

if TYPE_CHECKING:
    import torch
    from deepspeed import DeepSpeedEngine
    from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3
    from torch.optim import Optimizer

logger = logging.getLogger(__name__)

# keys of the ZeRO-3 optimizer state that hold objects, refilled from the live optimizer on load
_OBJECT_KEYS = ("loss_scaler", "zero_stage")


def require_deepspeed() -> ModuleType:
    try:
        import deepspeed
    except ImportError as exc:
        raise ConfigError(
            "run.sharding=zero3 needs DeepSpeed: pip install 'evidra[deepspeed]' (or set run.sharding=fsdp2)"
        ) from exc
    return deepspeed


def ds_config(precision: Precision, max_grad_norm: float | None, *, train: bool = True) -> dict[str, object]:
    """The DeepSpeed config of a ZeRO-3 run. evidra splits batches and steps its own LR schedule,
    so DeepSpeed sees one micro-batch per step: the micro-batches of a step accumulate their
    gradients (each loss is already divided by the step's global token count) until ``step``."""
    cfg: dict[str, object] = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": False},
        "bf16": {"enabled": precision.compute == "bfloat16", "check_grad_overflow": True},
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if train and max_grad_norm:
        cfg["gradient_clipping"] = float(max_grad_norm)
    return cfg


def initialize(
    model: torch.nn.Module, optimizer: Optimizer, precision: Precision, max_grad_norm: float | None
) -> tuple[DeepSpeedEngine, DeepSpeedZeroOptimizer_Stage3]:
    """``(DeepSpeedEngine, ZeRO-3 optimizer)`` for ``model`` and its torch optimizer."""
    deepspeed = require_deepspeed()
    engine, zero_opt, _, _ = deepspeed.initialize(
        model=model, optimizer=optimizer, config=ds_config(precision, max_grad_norm)
    )
    logger.info("ZeRO-3: %s partitioned over %d processes", type(engine.module).__name__, engine.world_size)
    return engine, zero_opt


def initialize_frozen(model: torch.nn.Module, precision: Precision) -> DeepSpeedEngine:
    """A frozen model (the KL reference) partitioned like the policy; its forward gathers each
    layer's weights on the fly. The returned engine must stay referenced."""
    deepspeed = require_deepspeed()
    engine, *_ = deepspeed.initialize(model=model, config=ds_config(precision, None, train=False))
    engine.eval()
    return engine


@contextmanager
def gathered(model: torch.nn.Module) -> Iterator[None]:
    """Every parameter of ``model`` gathered whole for the enclosed block (sampling: processes
    whose episodes end at different lengths issue no collectives while decoding)."""
    deepspeed = require_deepspeed()
    with deepspeed.zero.GatheredParameters(list(model.parameters())):
        yield


def step(engine: DeepSpeedEngine) -> float:
    """One optimizer step (clipping inside); the pre-clip gradient norm, or ``inf`` when
    DeepSpeed skipped the step because the norm was not finite."""
    engine.step()
    norm = engine.get_global_grad_norm()
    if not engine.was_step_applied() or norm is None:
        return float("inf")
    return float(norm)


def full_trainable(model: torch.nn.Module, is_main: bool) -> dict[str, torch.Tensor]:
    """The trainable parameters gathered whole from their fp32 master partitions (on every
    process, as it is a collective); only the main process keeps them."""
    from deepspeed.utils import safe_get_full_fp32_param

    out = {}
    for name, param in model.named_parameters():
        if param.requires_grad:
            full = safe_get_full_fp32_param(param)
            if is_main:
                out[name] = full.detach().cpu().clone().contiguous()
    return out


def save_optimizer(optimizer: DeepSpeedZeroOptimizer_Stage3, folder: Path, rank: int) -> None:
    """This process's optimizer partition: tensors and plain values only."""
    import torch

    state = {k: v for k, v in optimizer.state_dict().items() if k not in _OBJECT_KEYS}
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(state, folder / f"rank-{rank:05d}.pt")


def load_optimizer(optimizer: DeepSpeedZeroOptimizer_Stage3, folder: Path, rank: int, world: int) -> None:
    """Restore this process's partition (fp32 masters, moments) and the bf16 weights from it."""
    import torch

    files = sorted(folder.glob("rank-*.pt")) if folder.is_dir() else []
    if len(files) != world:
        raise CheckpointError(
            f"checkpoint {folder.parent} holds ZeRO-3 optimizer partitions of {len(files)} processes; "
            f"resume it with {len(files)} processes (this run has {world})"
        )
    path = folder / f"rank-{rank:05d}.pt"
    try:
        state = torch.load(path, weights_only=True)
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(f"ZeRO-3 optimizer partition {path} is unreadable ({reason})") from exc
    state["loss_scaler"] = optimizer.loss_scaler  # an object, so never stored: bf16 and fp32 do not scale
    if state.get("partition_count") != optimizer.partition_count:
        raise CheckpointError(f"checkpoint {folder.parent}: partition count differs from this run's")
    partitions: list[object] = [None] * world
    partitions[rank] = state
    optimizer.load_state_dict(partitions, load_optimizer_states=True, load_from_fp32_weights=True)
