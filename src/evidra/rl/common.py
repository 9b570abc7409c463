"""Pieces shared by the RL and SFT trainers: optimizer + schedule, and the data cursor."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Generic, TypeVar

from evidra.rl.run_config import OptimConfig
from evidra.rl.runs.checkpoint import TrainState

if TYPE_CHECKING:
    import torch
    from torch.optim.lr_scheduler import LRScheduler

T = TypeVar("T")


_SCHEDULES = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}


def warmup_steps(cfg: OptimConfig, total_steps: int) -> int:
    """``warmup_steps`` if set, else ``ceil(warmup_ratio x total_steps)``.

    >>> warmup_steps(OptimConfig(warmup_ratio=0.1), 25)
    3
    """
    if cfg.warmup_steps > 0:
        return cfg.warmup_steps
    return math.ceil(cfg.warmup_ratio * total_steps)


def make_optimizer(
    model: torch.nn.Module, cfg: OptimConfig, total_steps: int = 1
) -> tuple[torch.optim.AdamW, LRScheduler]:
    """AdamW over the trainable parameters and its schedule over ``total_steps`` scheduler steps.

    The schedules are transformers' (``get_scheduler``): linear warmup from 0 over the warmup
    steps, then constant, linear decay to 0, or cosine decay to 0 at ``total_steps``.

    The update is torch's fused AdamW kernel where it can run (``fused_adamw``): on a GPU the default
    multi-tensor path allocates a temporary as large as all trainable parameters in fp32 (12.4 GB
    for a 3B policy), the fused kernel none; on a CPU the fused step over 20 fp32 matrices of
    1000x1000 took 23 ms against 73 ms for the default loop (one thread).
    """
    import torch
    from transformers import get_scheduler

    params = [p for p in model.parameters() if p.requires_grad]
    betas = (cfg.betas[0], cfg.betas[1])
    optimizer = torch.optim.AdamW(
        params, lr=cfg.lr, betas=betas, weight_decay=cfg.weight_decay, fused=fused_adamw(params) or None
    )
    scheduler = get_scheduler(
        _SCHEDULES[cfg.schedule],
        optimizer,
        num_warmup_steps=warmup_steps(cfg, total_steps),
        num_training_steps=max(1, total_steps),
    )
    return optimizer, scheduler


def fused_adamw(params: Sequence[torch.Tensor]) -> bool:
    """Whether AdamW runs fused over ``params``: every one a plain floating-point tensor on one
    CPU or CUDA device (a sharded DTensor keeps torch's default path)."""
    import torch

    devices = {p.device.type for p in params}
    return (
        len(devices) == 1
        and devices <= {"cpu", "cuda"}
        and all(p.is_floating_point() and type(p) in (torch.Tensor, torch.nn.Parameter) for p in params)
    )


class DataCursor(Generic[T]):
    """Deterministic epochs of shuffled items; the position lives in ``TrainState``.

    Each call takes ``n * world`` items and returns this rank's ``n``, so every process sees
    different items and a resumed run continues exactly where the checkpoint left off.
    """

    def __init__(self, items: Sequence[T], seed: int) -> None:
        self.items, self.seed = items, seed

    def _order(self, epoch: int) -> list[int]:
        order = list(range(len(self.items)))
        random.Random(self.seed * 7919 + epoch).shuffle(order)
        return order

    def take(self, state: TrainState, n: int, rank: int = 0, world: int = 1) -> tuple[list[T], TrainState]:
        picked: list[int] = []
        epoch, offset = state.data_epoch, state.data_offset
        while len(picked) < n * world:
            order = self._order(epoch)
            take = order[offset : offset + n * world - len(picked)]
            picked += take
            offset += len(take)
            if offset >= len(order):
                epoch, offset = epoch + 1, 0
        new_state = TrainState(state.step, epoch, offset)
        return [self.items[i] for i in picked[rank * n : (rank + 1) * n]], new_state
