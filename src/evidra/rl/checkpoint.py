"""Atomic, complete training checkpoints and resumption.

A checkpoint folder ``step-000010/`` holds the trainable weights (the LoRA adapter, or the full
model), the optimizer and scheduler states, every RNG state, the data position and the
resolved config. It is written under a temporary name and renamed only once complete, so a run
killed mid-write leaves the previous checkpoint as the newest readable one.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidra.config import dump_config
from evidra.errors import CheckpointError

_NAME = re.compile(r"^step-(\d{6})$")


@dataclass(frozen=True)
class TrainState:
    step: int
    data_epoch: int
    data_offset: int


def rng_state() -> dict[str, Any]:
    import numpy as np
    import torch

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def trainable_state(model: Any) -> dict[str, Any]:
    """Only the parameters that train (adapter weights under LoRA), detached on CPU."""
    return {n: p.detach().cpu().clone() for n, p in model.named_parameters() if p.requires_grad}


def save_checkpoint(
    output_dir: str | Path, state: TrainState, model: Any, optimizer: Any, scheduler: Any, config: Any
) -> Path:
    import torch

    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{state.step:06d}"
    tmp = root / f".tmp-step-{state.step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    torch.save(trainable_state(model), tmp / "weights.pt")
    torch.save(
        {"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(), "rng": rng_state()},
        tmp / "trainer.pt",
    )
    (tmp / "state.json").write_text(json.dumps(state.__dict__))
    dump_config(config, tmp / "config.yaml")
    for file in tmp.iterdir():  # make the bytes durable before the rename publishes them
        with open(file, "rb") as fh:
            os.fsync(fh.fileno())
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _NAME.match(p.name) and (p / "state.json").is_file()]
    return sorted(found, key=lambda p: p.name)


def prune_checkpoints(output_dir: str | Path, keep: int) -> None:
    for old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def load_trainable_weights(folder: str | Path) -> dict[str, Any]:
    """The trainable tensors of a checkpoint: ``weights.safetensors`` if present, else ``weights.pt``."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    root = Path(folder)
    path = root / "weights.safetensors"
    try:
        if path.is_file():
            return dict(load_file(path))
        path = root / "weights.pt"
        return dict(torch.load(path, weights_only=True))
    except (OSError, RuntimeError, SafetensorError, pickle.UnpicklingError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(
            f"weights of checkpoint {root} are unreadable ({reason}); use another checkpoint of the run"
        ) from exc


def load_checkpoint(path: str | Path, model: Any, optimizer: Any, scheduler: Any) -> TrainState:
    """Restore weights, optimizer, scheduler and RNG states in place; return the train state."""
    import torch

    folder = Path(path)
    try:
        weights = torch.load(folder / "weights.pt", weights_only=True)
        trainer = torch.load(folder / "trainer.pt", weights_only=False)
        state = TrainState(**json.loads((folder / "state.json").read_text()))
    except (OSError, json.JSONDecodeError, RuntimeError) as exc:
        raise CheckpointError(
            f"checkpoint {folder} is unreadable ({exc}); delete it to resume from an older one"
        ) from exc
    params = dict(model.named_parameters())
    missing = [n for n in weights if n not in params]
    if missing:
        raise CheckpointError(f"checkpoint {folder} has weights the model lacks: {missing[:3]}")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)
    optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])
    set_rng_state(trainer["rng"])
    return state
