"""Pieces shared by the RL and SFT trainers: optimizer + schedule, and the data cursor."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from evidra.rl.checkpoint import TrainState
from evidra.rl.config import OptimConfig

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


def make_optimizer(model: Any, cfg: OptimConfig, total_steps: int = 1) -> tuple[Any, Any]:
    """AdamW over the trainable parameters and its schedule over ``total_steps`` scheduler steps.

    The schedules are transformers' (``get_scheduler``): linear warmup from 0 over the warmup
    steps, then constant, linear decay to 0, or cosine decay to 0 at ``total_steps``.
    """
    import torch
    from transformers import get_scheduler

    params = [p for p in model.parameters() if p.requires_grad]
    betas = (cfg.betas[0], cfg.betas[1])
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=betas, weight_decay=cfg.weight_decay)
    scheduler = get_scheduler(
        _SCHEDULES[cfg.schedule],
        optimizer,
        num_warmup_steps=warmup_steps(cfg, total_steps),
        num_training_steps=max(1, total_steps),
    )
    return optimizer, scheduler


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
