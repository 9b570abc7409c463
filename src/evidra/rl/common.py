"""Pieces shared by the RL and SFT trainers: optimizer + schedule, and the data cursor."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from evidra.rl.checkpoint import TrainState
from evidra.rl.config import OptimConfig

T = TypeVar("T")


def make_optimizer(model: Any, cfg: OptimConfig) -> tuple[Any, Any]:
    """AdamW over the trainable parameters, with linear warmup then a constant rate."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    betas = (cfg.betas[0], cfg.betas[1])
    optimizer = torch.optim.AdamW(params, lr=cfg.lr, betas=betas, weight_decay=cfg.weight_decay)
    warmup = max(1, cfg.warmup_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / warmup))
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
