"""Where the training maths runs: processes (accelerate), precision (autocast) and sharding
(FSDP2 or DeepSpeed ZeRO-3).

One process or several under ``accelerate launch`` / ``torchrun``. Without sharding every process
holds the whole policy and accelerate wraps it in DDP. With ``run.sharding=zero3`` DeepSpeed's
engine partitions the policy, its gradients and optimizer states (``rl/parallel/zero3.py``). With
``run.sharding=fsdp2`` the policy
(and a full-fine-tuning KL reference) is sharded with PyTorch's own FSDP2 (``fully_shard`` on
every decoder layer and vision block, then the root): fp32 sharded parameters, a
``MixedPrecisionPolicy`` that all-gathers them in the compute dtype and reduces gradients in
fp32, and sharded checkpoints written without pickle (``rl/parallel/fsdp_state.py``).

FSDP2 is applied here rather than through accelerate's FSDP plugin because accelerate only
enables that plugin on accelerators (on CPU it falls back to DDP), while ``fully_shard`` is the
same call on CPU (gloo) and GPU (NCCL): the sharded path is tested on two CPU processes.

Every process must issue the same collectives in the same order, so a sharded run equalises
the number of micro-batches across processes with empty ones (``pad_microbatches``) and
generates with all-gathered weights (``Engine.generation``), so that processes whose episodes
end at different lengths never wait on each other.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import TYPE_CHECKING, TypeVar, cast

from evidra.core.errors import ConfigError
from evidra.rl.parallel.precision import Precision
from evidra.rl.run_config import RunConfig

if TYPE_CHECKING:
    import torch
    from accelerate import Accelerator
    from deepspeed import DeepSpeedEngine
    from torch.distributed.fsdp import FSDPModule
    from torch.optim import Optimizer


logger = logging.getLogger(__name__)

T = TypeVar("T")
S = TypeVar("S")  # a learning-rate scheduler, handed back as it came


class Engine:
    """The accelerator, the precision and the sharding of one training run."""

    def __init__(self, run: RunConfig, precision: Precision, accelerator: Accelerator | None = None) -> None:
        import torch
        from accelerate import Accelerator
        from accelerate.utils import DistributedType

        self.acc = accelerator or Accelerator(cpu=not torch.cuda.is_available())
        self.precision = precision
        self.sharding = run.sharding
        self.sharded = run.sharding == "fsdp2"  # FSDP2's fully_shard (ZeRO-3 is ``self.zero3``)
        self.zero3 = run.sharding == "zero3"
        # ZeRO-3 engines of frozen models, kept alive with their hooks
        self._frozen: list[DeepSpeedEngine] = []
        if self.acc.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED):
            raise ConfigError(
                f"this accelerate config uses {self.acc.distributed_type.value}; evidra shards with "
                "run.sharding=fsdp2|zero3 itself: launch with a multi-GPU config (configs/accelerate/)"
            )
        if run.sharding != "none" and self.acc.num_processes < 2:
            raise ConfigError(
                f"run.sharding={run.sharding} shards over processes, but this run has one; launch several "
                "(accelerate launch --num_processes N ...) or set run.sharding=none"
            )

    # processes ------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self.acc.device

    @property
    def num_processes(self) -> int:
        return int(self.acc.num_processes)

    @property
    def process_index(self) -> int:
        return int(self.acc.process_index)

    @property
    def is_main_process(self) -> bool:
        return bool(self.acc.is_main_process)

    def sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """``tensor`` summed over processes."""
        return tensor if self.num_processes == 1 else self.acc.reduce(tensor, "sum")

    def all_min(self, value: int) -> int:
        """The smallest ``value`` over processes."""
        return self._reduce(value, "MIN")

    def all_max(self, value: int) -> int:
        return self._reduce(value, "MAX")

    def _reduce(self, value: int, op: str) -> int:
        import torch

        if self.num_processes == 1:
            return value
        t = torch.tensor(value, device=self.device)
        torch.distributed.all_reduce(t, op=getattr(torch.distributed.ReduceOp, op))
        return int(t)

    # model and optimizer --------------------------------------------------------------------
    def prepare(
        self,
        model: torch.nn.Module,
        make_optimizer: Callable[[torch.nn.Module], tuple[Optimizer, S]],
        max_grad_norm: float | None = None,
    ) -> tuple[torch.nn.Module, Optimizer, S]:
        """``(model, optimizer, scheduler)`` ready to train: sharded or DDP-wrapped. The
        scheduler drives the torch optimizer's learning rates under every sharding."""
        if self.zero3:
            from evidra.rl.parallel import zero3

            optimizer, scheduler = make_optimizer(model)
            engine, zero_opt = zero3.initialize(model, optimizer, self.precision, max_grad_norm)
            return engine, zero_opt, scheduler
        if self.sharded:
            shard_model(model, self.precision)
            optimizer, scheduler = make_optimizer(model)
            return model, optimizer, scheduler
        optimizer, scheduler = make_optimizer(model)
        model, optimizer = self.acc.prepare(model, optimizer)
        return model, optimizer, scheduler

    def prepare_frozen(self, model: torch.nn.Module) -> torch.nn.Module:
        """A frozen model (the KL reference) sharded like the policy, or as it is."""
        if self.zero3:
            from evidra.rl.parallel import zero3

            self._frozen.append(zero3.initialize_frozen(model, self.precision))
        elif self.sharded:
            shard_model(model, Precision(self.precision.compute, self.precision.compute))
        return model

    def unwrap(self, model: torch.nn.Module) -> torch.nn.Module:
        if self.zero3:
            inner: torch.nn.Module = getattr(model, "module", model)  # the DeepSpeedEngine's module
            return inner
        return model if self.sharded else self.acc.unwrap_model(model)

    def autocast(self) -> AbstractContextManager[None]:
        """Autocast for unsharded mixed precision (FSDP2's policy and DeepSpeed's bf16 module
        cast the sharded cases)."""
        return nullcontext() if self.sharded or self.zero3 else self.precision.autocast(self.device)

    def backward(self, loss: torch.Tensor, model: torch.nn.Module | None = None) -> None:
        if self.zero3:
            engine = cast("DeepSpeedEngine", model)
            engine.backward(loss)  # reduce-scatters into the partitions
            return
        self.acc.backward(loss)

    def no_sync(self, model: torch.nn.Module) -> AbstractContextManager[None]:
        """Skip the gradient all-reduce of a micro-batch that is not the last (DDP only; FSDP2
        and ZeRO-3 reduce-scatter every micro-batch's gradient, which keeps memory sharded)."""
        if self.sharded or self.zero3 or self.num_processes == 1:
            return nullcontext()
        return self.acc.no_sync(model)

    def optimizer_step(self, model: torch.nn.Module, optimizer: Optimizer, max_norm: float) -> float:
        """Clip the gradients to ``max_norm`` and step; returns the pre-clip norm. A non-finite
        norm is returned without stepping (the gradients are dropped)."""
        import math

        if self.zero3:
            from evidra.rl.parallel import zero3

            return zero3.step(model)  # clips with the norm given to ``prepare``
        norm = self.clip_grad_norm(model, max_norm)
        if not math.isfinite(norm):
            optimizer.zero_grad(set_to_none=True)
            return norm
        optimizer.step()
        return norm

    def clip_grad_norm(self, model: torch.nn.Module, max_norm: float) -> float:
        import torch

        params = [p for p in model.parameters() if p.requires_grad]
        if not self.sharded:
            return float(self.acc.clip_grad_norm_(params, max_norm))
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    @contextmanager
    def generation(self, model: torch.nn.Module) -> Iterator[None]:
        """Sampling with every shard all-gathered once and kept until the rollout ends; an
        unsharded model samples under ``torch.inference_mode`` (see ``no_autograd``)."""
        if self.zero3:
            from evidra.rl.parallel import zero3

            with zero3.gathered(self.unwrap(model)):
                yield
            return
        if not self.sharded:
            with self.no_autograd(), self.autocast():
                yield
            return
        modules = fsdp_modules(model)
        for m in modules:
            m.unshard()
            m.set_reshard_after_forward(False)
        try:
            yield
        finally:
            for m in modules:
                m.reshard()
                m.set_reshard_after_forward(True)

    def no_autograd(self) -> AbstractContextManager[None]:
        """Forward passes whose results never meet autograd: ``torch.inference_mode`` on an
        unsharded model (it skips autograd's per-operation bookkeeping: about 12% of a tiny
        model's sampling time), ``torch.no_grad`` where FSDP2 or ZeRO-3 manage the parameters
        (their hooks create tensors that later training passes reuse). Tensors made inside are
        inference tensors: copy one (``clone``) before autograd sees it."""
        import torch

        return torch.no_grad() if self.sharded or self.zero3 else torch.inference_mode()

    def wait(self) -> None:
        self.acc.wait_for_everyone()


def fsdp_modules(model: torch.nn.Module) -> list[FSDPModule]:
    from torch.distributed.fsdp import FSDPModule

    return [m for m in model.modules() if isinstance(m, FSDPModule)]


def shard_model(model: torch.nn.Module, precision: Precision) -> torch.nn.Module:
    """``fully_shard`` every decoder layer and vision block (``_no_split_modules``), then the root."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    compute = getattr(torch, precision.compute)
    policy = MixedPrecisionPolicy(
        param_dtype=compute if precision.mixed else None, reduce_dtype=torch.float32, cast_forward_inputs=True
    )
    get_base = getattr(model, "get_base_model", None)  # a PEFT model's base
    base = get_base() if get_base is not None else model
    blocks = set(getattr(base, "_no_split_modules", None) or ())
    if not blocks:
        raise ConfigError(f"{type(base).__name__} names no layer classes (_no_split_modules) to shard")
    for module in list(model.modules()):
        if type(module).__name__ in blocks:
            fully_shard(module, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    logger.info("FSDP2: sharded %d blocks of %s", len(fsdp_modules(model)) - 1, type(base).__name__)
    return model


def pad_microbatches(batches: Sequence[T], target: int, empty: Callable[[T], T]) -> list[T]:
    """``batches`` extended to ``target`` with ``empty(last)`` copies, which contribute nothing
    but run the same forward and backward (so sharded processes issue the same collectives).

    >>> pad_microbatches([1, 2], 4, lambda x: 0)
    [1, 2, 0, 0]
    """
    out = list(batches)
    while len(out) < target:
        out.append(empty(out[-1]))
    return out
