"""Atomic, complete training checkpoints and resumption.

A checkpoint folder ``step-000010/`` holds the trainable weights (``weights.safetensors``: the
LoRA adapter, or the full model's trainable tensors, gathered whole even from a sharded run),
the optimizer state (in ``trainer.pt``, or one shard per process under ``optimizer/``: safetensors
and a JSON manifest under FSDP2 (``fsdp_state``), each process's ZeRO-3 partition under DeepSpeed),
the scheduler state, every RNG state,
the data position and the resolved config. It is written under a temporary name and renamed
only once complete, so a run killed mid-write leaves the previous checkpoint as the newest
readable one.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, NotRequired, TypedDict, cast

from evidra.core.config import dump_config
from evidra.core.errors import CheckpointError
from evidra.safeio.confined import inside
from evidra.safeio.jsonfiles import read_capped_text

if TYPE_CHECKING:
    import torch
    from torch import Tensor
    from torch.distributed.checkpoint.state_dict import ValueType
    from torch.optim import Optimizer
    from torch.optim.lr_scheduler import LRScheduler

    from evidra.rl.parallel.processes import Engine
    from evidra.rl.run_config import RLConfig, SFTConfig

logger = logging.getLogger(__name__)
_NAME = re.compile(r"^step-(\d{6})$")
WEIGHTS = "weights.safetensors"
CHECKSUMS = "checksums.json"  # sha256 of every other file of the checkpoint


@dataclass(frozen=True)
class TrainState:
    step: int
    data_epoch: int
    data_offset: int


class RngState(TypedDict):
    """Every RNG state of a process, as plain types and tensors."""

    python: tuple[object, ...]
    numpy: tuple[str, Tensor, int, int, float]  # NumPy's (kind, keys, pos, has_gauss, cached)
    torch: Tensor


class TrainerFile(TypedDict):
    """``trainer.pt``: the scheduler and RNG states, and the optimizer's unless it is sharded."""

    scheduler: dict[str, object]
    rng: RngState
    optimizer: NotRequired[dict[str, object]]


def rng_state() -> RngState:
    """Python, NumPy and torch RNG states as plain types and tensors (loadable with weights_only)."""
    import numpy as np
    import torch

    kind, keys, pos, has_gauss, cached = np.random.get_state()
    numpy_state = (
        str(kind),
        torch.from_numpy(np.asarray(keys, dtype=np.int64)),
        int(pos),
        int(has_gauss),
        float(cached),
    )
    return {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}


def set_rng_state(state: RngState) -> None:
    import numpy as np
    import torch

    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])


def trainable_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Only the parameters that train (adapter weights under LoRA), detached on CPU."""
    return {n: p.detach().cpu().clone().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def load_trainable_weights(folder: str | Path) -> dict[str, torch.Tensor]:
    """The trainable tensors of a checkpoint: ``weights.safetensors`` if present, else ``weights.pt``."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    root = Path(folder)
    path = root / WEIGHTS
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


def save_checkpoint(
    output_dir: str | Path,
    state: TrainState,
    model: torch.nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    config: RLConfig | SFTConfig,
    engine: Engine | None = None,
) -> Path:
    """Write ``step-NNNNNN/`` atomically; every process calls this when the run is sharded."""
    root = Path(output_dir) / "checkpoints"
    final = root / f"step-{state.step:06d}"
    tmp = root / f".tmp-step-{state.step:06d}"
    main = engine is None or engine.is_main_process
    if main:
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            tmp.mkdir(parents=True)
        except OSError as exc:
            _raise_unwritten(exc, root, final.name)
    if engine is not None:
        engine.wait()
    weights = _gather_trainable(model, engine)
    sharded = engine is not None and engine.sharding != "none"
    if engine is not None and engine.zero3:  # each process writes its optimizer partition
        from evidra.rl.parallel import zero3

        zero3.save_optimizer(optimizer, tmp / "optimizer", engine.process_index)
        engine.wait()  # every partition is on disk before the main process sums and publishes
    elif engine is not None and engine.sharded:  # each process writes its shards, never a pickle
        from evidra.rl.parallel import fsdp_state

        fsdp_state.save(model, optimizer, tmp / "optimizer", engine.process_index, engine.num_processes)
        engine.wait()
    if main:
        try:
            _write_main(tmp, weights, state, optimizer, scheduler, config, sharded=sharded)
        except Exception as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            _raise_unwritten(exc, root, final.name)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
    if engine is not None:
        engine.wait()
    return final


def _raise_unwritten(exc: Exception, root: Path, name: str) -> NoReturn:
    """A checkpoint that could not be written (a full disk: ``OSError`` from Python, ``RuntimeError``
    from torch's writer, ``SafetensorError``) as one ``CheckpointError``; anything else re-raised."""
    from safetensors import SafetensorError

    if not isinstance(exc, (OSError, RuntimeError, SafetensorError)):
        raise exc
    reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    try:
        free = f"; {shutil.disk_usage(root).free >> 20} MiB free there"
    except OSError:
        free = ""
    done = list_checkpoints(root.parent)
    kept = f"the run resumes from {done[-1].name}, kept intact" if done else "no earlier checkpoint was saved"
    raise CheckpointError(
        f"checkpoint {name} could not be written in {root} ({reason}{free}); {kept}; "
        "free disk space or set run.output_dir elsewhere, then run again"
    ) from exc


def _gather_trainable(model: torch.nn.Module, engine: Engine | None) -> dict[str, torch.Tensor]:
    if engine is not None and engine.zero3:
        from evidra.rl.parallel import zero3

        return zero3.full_trainable(model, engine.is_main_process)
    if engine is None or not engine.sharded:
        return trainable_state(model)
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=True)
    full = cast("dict[str, torch.Tensor]", get_model_state_dict(model, options=options))  # parameters only
    return {k: v.contiguous() for k, v in full.items()}


def dump_run_config(cfg: RLConfig | SFTConfig, path: str | Path) -> Path:
    """Write a run's resolved config, its ``model.path`` made absolute when it is a local folder,
    so the run's checkpoints and exports still find their base model from any directory."""
    from dataclasses import replace

    from evidra.models.references import recorded_ref

    if cfg.model.path:
        cfg = replace(cfg, model=replace(cfg.model, path=recorded_ref(cfg.model.path)))
    return dump_config(cfg, path)


def _write_main(
    tmp: Path,
    weights: dict[str, torch.Tensor],
    state: TrainState,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    config: RLConfig | SFTConfig,
    *,
    sharded: bool,
) -> None:
    import torch
    from safetensors.torch import save_file

    save_file(weights, str(tmp / WEIGHTS))
    trainer: TrainerFile = {"scheduler": scheduler.state_dict(), "rng": rng_state()}
    if not sharded:
        trainer["optimizer"] = optimizer.state_dict()
    torch.save(trainer, tmp / "trainer.pt")
    (tmp / "state.json").write_text(json.dumps(state.__dict__))
    dump_run_config(config, tmp / "config.yaml")
    sums = {str(f.relative_to(tmp)): _sha256(f) for f in sorted(tmp.rglob("*")) if f.is_file()}
    (tmp / CHECKSUMS).write_text(json.dumps(sums, indent=1))
    for file in (f for f in tmp.rglob("*") if f.is_file()):  # durable bytes before the rename publishes them
        with open(file, "rb") as fh:
            os.fsync(fh.fileno())


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verify_checkpoint(folder: str | Path) -> None:
    """Raise ``CheckpointError`` naming the first file whose bytes differ from the recorded
    checksum (or that is missing); checkpoints written before checksums existed pass."""
    root = Path(folder)
    manifest = root / CHECKSUMS
    if not manifest.is_file():
        return
    try:
        sums = json.loads(read_capped_text(manifest, "checkpoint checksums"))
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"checkpoint {root}: {CHECKSUMS} is unreadable ({exc})") from exc
    if not isinstance(sums, dict):
        raise CheckpointError(f"checkpoint {root}: {CHECKSUMS} is not a JSON object of file names")
    for name in sums:  # every name checked before any file is read
        inside(root, name, f"{manifest}", CheckpointError)
    for name, expected in sums.items():
        path = root / name
        if not path.is_file() or _sha256(path) != expected:
            raise CheckpointError(f"checkpoint {root}: {name} is missing or corrupt (checksum mismatch)")


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if _NAME.match(p.name) and (p / "state.json").is_file()]
    return sorted(found, key=lambda p: p.name)


def prune_checkpoints(output_dir: str | Path, keep: int) -> None:
    for old in list_checkpoints(output_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(
    path: str | Path,
    model: torch.nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    engine: Engine | None = None,
) -> TrainState:
    """Restore weights, optimizer, scheduler and RNG states in place; return the train state.

    Nothing in a checkpoint is unpickled beyond tensors and plain values (``weights_only``)."""
    import torch

    folder = Path(path)
    verify_checkpoint(folder)
    try:
        weights = load_trainable_weights(folder)
        trainer = torch.load(folder / "trainer.pt", weights_only=True)
        state = TrainState(**json.loads(read_capped_text(folder / "state.json", "checkpoint state")))
        if min(state.step, state.data_epoch, state.data_offset) < 0:
            raise ValueError(f"negative position in state.json: {state}")
    except (
        OSError,
        json.JSONDecodeError,
        RuntimeError,
        TypeError,
        ValueError,
        pickle.UnpicklingError,
    ) as exc:
        raise CheckpointError(
            f"checkpoint {folder} is unreadable ({str(exc).splitlines()[0]}); "
            "delete it to resume from an older one"
        ) from exc
    _restore_weights(folder, model, weights, engine)
    try:
        _restore_optimizer(folder, model, optimizer, scheduler, trainer, engine)
    except (KeyError, ValueError, RuntimeError, TypeError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(
            f"checkpoint {folder}: the optimizer or scheduler state does not fit this run ({reason}); "
            "resume from another checkpoint"
        ) from exc
    set_rng_state(trainer["rng"])
    return state


def _restore_optimizer(
    folder: Path,
    model: torch.nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    trainer: TrainerFile,
    engine: Engine | None,
) -> None:
    if engine is not None and engine.zero3:  # the fp32 master partitions restore the weights too
        from evidra.rl.parallel import zero3

        zero3.load_optimizer(optimizer, folder / "optimizer", engine.process_index, engine.num_processes)
    elif engine is not None and engine.sharded:
        from evidra.rl.parallel import fsdp_state

        rank, world = engine.process_index, engine.num_processes
        fsdp_state.load(
            model, optimizer, folder / "optimizer", rank, world, lambda ok: engine.all_min(int(ok)) == 1
        )
    else:
        optimizer.load_state_dict(trainer["optimizer"])
    scheduler.load_state_dict(trainer["scheduler"])


def _restore_weights(
    folder: Path, model: torch.nn.Module, weights: dict[str, torch.Tensor], engine: Engine | None
) -> None:
    import torch

    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    bad = [n for n, v in weights.items() if v.is_floating_point() and not bool(torch.isfinite(v).all())]
    if bad:
        raise CheckpointError(
            f"checkpoint {folder} holds non-finite weights ({bad[0]}); resume from an older one"
        )
    missing = [n for n in weights if n not in trainable]
    if missing:
        raise CheckpointError(f"checkpoint {folder} has weights the model does not train: {missing[:3]}")
    absent = sorted(trainable - set(weights))
    if absent:
        raise CheckpointError(f"checkpoint {folder} lacks trained weights {absent[:3]}; use an older one")
    shapes = {n: tuple(getattr(p, "ds_shape", None) or p.shape) for n, p in model.named_parameters()}
    wrong = [n for n, v in weights.items() if tuple(v.shape) != shapes[n]]
    if wrong:
        n = wrong[0]
        raise CheckpointError(
            f"checkpoint {folder}: {n} has shape {list(weights[n].shape)}, the model's is {list(shapes[n])} "
            "(a checkpoint of another model or LoRA rank); resume from a checkpoint of this run"
        )
    if engine is not None and engine.zero3:
        return  # ZeRO-3 partitions come back from the optimizer's fp32 masters
    if engine is not None and engine.sharded:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        state = cast("dict[str, ValueType]", weights)
        set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=False))
        return
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def resume_newest(
    output_dir: str | Path,
    model: torch.nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    engine: Engine | None = None,
) -> TrainState | None:
    """Load the newest checkpoint that verifies and reads; a corrupt one is named in a warning
    and the previous complete one is used. None when no checkpoint is usable (a fresh start)."""
    for folder in reversed(list_checkpoints(output_dir)):
        try:
            state = load_checkpoint(folder, model, optimizer, scheduler, engine)
        except CheckpointError as exc:
            logger.warning("skipping checkpoint %s: %s", folder.name, exc)
            continue
        logger.info("resumed from %s (step %d)", folder, state.step)
        return state
    return None


def save_and_prune(
    output_dir: str | Path,
    state: TrainState,
    model: torch.nn.Module,
    optimizer: Optimizer,
    scheduler: LRScheduler,
    config: RLConfig | SFTConfig,
    engine: Engine,
) -> Path:
    """``save_checkpoint`` on every process, then keep the newest ``config.run.keep_checkpoints``."""
    path = save_checkpoint(output_dir, state, model, optimizer, scheduler, config, engine)
    if engine.is_main_process:
        prune_checkpoints(output_dir, config.run.keep_checkpoints)
    engine.wait()
    return path
