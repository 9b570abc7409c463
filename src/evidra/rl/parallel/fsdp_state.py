"""FSDP2 optimizer state on disk without pickle: one safetensors file and one JSON manifest per process.

``torch.distributed.checkpoint`` (DCP) keeps its metadata as a pickle (``.metadata``, read with
``pickle.load``), so resuming from a DCP folder would run whatever code the folder's author
planted; the checkpoint's checksums are written by the same author and prove nothing. evidra
therefore writes the optimizer state of an FSDP2 run itself::

    optimizer/rank-00000.safetensors   this process's local shards of every state tensor
    optimizer/rank-00000.json          {"format", "world", "rank", "tensors": {key: {shape, local,
                                       dtype, placements}}, "values": {key: plain value},
                                       "param_groups": [...]}

A key is ``state/<parameter>/<name>`` (``exp_avg``, ``exp_avg_sq``, ``step``). Loading fills the
template that ``get_optimizer_state_dict`` gives for this run, after checking that every key,
global shape, local shape, dtype and placement matches, and hands it to
``set_optimizer_state_dict``. safetensors reads tensors only, bounded by the file's size; the
manifest is JSON. A checkpoint is resumed by the same number of processes that wrote it; a
DCP folder of older evidra versions is refused in one line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evidra.core.errors import CheckpointError

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer

FORMAT = 1
MAX_MANIFEST_BYTES = 64 << 20  # keys, shapes and param groups: far below this for any model
_DCP_METADATA = ".metadata"
_SCALARS = (bool, int, float, str, type(None))


def save(model: torch.nn.Module, optimizer: Optimizer, folder: Path, rank: int, world: int) -> None:
    """Write this process's share of the optimizer state (every process calls this)."""
    from safetensors.torch import save_file
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    state: dict[str, Any] = dict(get_optimizer_state_dict(model, optimizer))
    tensors: dict[str, torch.Tensor] = {}
    entries: dict[str, dict[str, object]] = {}
    values: dict[str, object] = {}
    for key, value in _flat(state["state"]):
        if hasattr(value, "to_local"):  # a DTensor: this process's shard
            local = value.to_local()
            entries[key] = _entry(value, local, [str(p) for p in value.placements])
            tensors[key] = local.detach().cpu().clone().contiguous()
        elif hasattr(value, "dtype") and hasattr(value, "shape"):
            entries[key] = _entry(value, value, None)
            tensors[key] = value.detach().cpu().clone().contiguous()
        elif isinstance(value, _SCALARS):
            values[key] = value
        else:
            raise CheckpointError(
                f"optimizer state {key} is a {type(value).__name__}, which evidra cannot save"
            )
    manifest = {
        "format": FORMAT,
        "world": world,
        "rank": rank,
        "tensors": entries,
        "values": values,
        "param_groups": [_plain(group) for group in state["param_groups"]],
    }
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / f"rank-{rank:05d}.safetensors"))
    (folder / f"rank-{rank:05d}.json").write_text(json.dumps(manifest))


def load(
    model: torch.nn.Module,
    optimizer: Optimizer,
    folder: Path,
    rank: int,
    world: int,
    agree: Callable[[bool], bool],
) -> None:
    """Restore this process's share; ``CheckpointError`` (one line) if the files do not fit this
    run. ``agree(ok)`` is True when every process read its share, so that all raise together
    rather than leave one waiting in a collective."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    template = get_optimizer_state_dict(model, optimizer)
    error: CheckpointError | None = None
    try:
        _read_into(template, folder, rank, world)
    except CheckpointError as exc:
        error = exc
    if not agree(error is None):
        raise error or CheckpointError(
            f"checkpoint {folder.parent}: another process could not read its FSDP2 optimizer state"
        )
    set_optimizer_state_dict(model, optimizer, template)


def _read_into(template: dict[str, Any], folder: Path, rank: int, world: int) -> None:
    if (folder / _DCP_METADATA).exists():
        raise CheckpointError(
            f"checkpoint {folder.parent} holds its FSDP2 optimizer state in torch.distributed.checkpoint's "
            "format (a pickled .metadata, which evidra does not read); resume from a checkpoint written "
            "by this version, or start the run again"
        )
    manifests = sorted(folder.glob("rank-*.json")) if folder.is_dir() else []
    if len(manifests) != world:
        raise CheckpointError(
            f"checkpoint {folder.parent} holds FSDP2 optimizer state of {len(manifests)} processes; "
            f"resume it with that many processes (this run has {world})"
        )
    name = f"rank-{rank:05d}"
    manifest = _manifest(folder / f"{name}.json", rank, world)
    tensors = _tensors(folder / f"{name}.safetensors")
    _fill(template, manifest, tensors, f"FSDP2 optimizer state {folder / name}")


def _flat(state: dict[str, Any]) -> list[tuple[str, Any]]:
    return [(f"state/{fqn}/{name}", value) for fqn, per in state.items() for name, value in per.items()]


def _entry(value: torch.Tensor, local: torch.Tensor, placements: list[str] | None) -> dict[str, object]:
    return {
        "shape": list(value.shape),
        "local": list(local.shape),
        "dtype": str(local.dtype),
        "placements": placements,
    }


def _plain(group: Mapping[str, object]) -> dict[str, object]:
    out = {k: list(v) if isinstance(v, tuple) else v for k, v in group.items()}
    bad = [k for k, v in out.items() if k != "params" and not _is_plain(v)]
    if bad:
        raise CheckpointError(f"optimizer setting {bad[0]} is not a plain value; evidra cannot save it")
    return out


def _is_plain(value: object) -> bool:
    return isinstance(value, _SCALARS) or (
        isinstance(value, list) and all(isinstance(v, _SCALARS) for v in value)
    )


def _manifest(path: Path, rank: int, world: int) -> dict[str, object]:
    try:
        if path.stat().st_size > MAX_MANIFEST_BYTES:
            raise ValueError(f"over {MAX_MANIFEST_BYTES >> 20} MiB")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise CheckpointError(f"FSDP2 optimizer manifest {path} is unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise CheckpointError(f"FSDP2 optimizer manifest {path} is not in evidra's format {FORMAT}")
    if (data.get("rank"), data.get("world")) != (rank, world):
        raise CheckpointError(f"FSDP2 optimizer manifest {path} was written by another process layout")
    return data


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return dict(load_file(str(path)))
    except (OSError, SafetensorError, RuntimeError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(f"FSDP2 optimizer shard {path} is unreadable ({reason})") from None


def _fill(
    template: dict[str, Any], manifest: Mapping[str, object], tensors: Mapping[str, torch.Tensor], where: str
) -> None:
    """Copy the stored shards and values into ``template`` in place, after checking each against it."""
    entries, values = manifest.get("tensors"), manifest.get("values")
    if not isinstance(entries, dict) or not isinstance(values, dict):
        raise CheckpointError(f"{where}: the manifest lists no tensors")
    flat = _flat(template["state"])
    keys = {key for key, value in flat if hasattr(value, "shape")}
    if keys != set(entries) or keys != set(tensors) or {k for k, _ in flat} - keys != set(values):
        odd = sorted((keys ^ set(entries)) | (keys ^ set(tensors)))
        raise CheckpointError(f"{where} does not hold this model's optimizer state (e.g. {odd[:2]})")
    for per, (key, value) in zip(_owners(template["state"]), flat, strict=True):
        if not hasattr(value, "shape"):
            if type(values[key]) is not type(value):
                raise CheckpointError(f"{where}: {key} is not a {type(value).__name__}")
            per[key.rsplit("/", 1)[1]] = values[key]
            continue
        local = value.to_local() if hasattr(value, "to_local") else value
        placements = [str(p) for p in value.placements] if hasattr(value, "to_local") else None
        stored = tensors[key]
        if entries[key] != _entry(value, local, placements) or tuple(stored.shape) != tuple(local.shape):
            raise CheckpointError(f"{where}: {key} was saved with another shape or sharding than this run's")
        if stored.dtype != local.dtype:
            raise CheckpointError(f"{where}: {key} is {stored.dtype}, this run's is {local.dtype}")
        with _no_grad():
            local.copy_(stored)
    template["param_groups"] = _groups(template["param_groups"], manifest.get("param_groups"), where)


def _owners(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each parameter's state dict once per entry it holds, in the order of ``_flat``."""
    return [per for per in state.values() for _ in per]


def _groups(live: list[dict[str, Any]], stored: object, where: str) -> list[dict[str, Any]]:
    """The stored param groups, typed like this run's (tuples where it has tuples)."""
    if not isinstance(stored, list) or len(stored) != len(live):
        raise CheckpointError(f"{where}: the optimizer's parameter groups differ from this run's")
    out = []
    for mine, theirs in zip(live, stored, strict=True):
        if (
            not isinstance(theirs, dict)
            or set(theirs) != set(mine)
            or theirs["params"] != list(mine["params"])
        ):
            raise CheckpointError(f"{where}: the optimizer's parameter groups differ from this run's")
        group = {}
        for name, value in mine.items():
            new = theirs[name]
            if name != "params" and not _is_plain(new):
                raise CheckpointError(f"{where}: optimizer setting {name} is not a plain value")
            group[name] = tuple(new) if isinstance(value, tuple) and isinstance(new, list) else new
        group["params"] = mine["params"]
        out.append(group)
    return out


def _no_grad() -> torch.no_grad:
    import torch

    return torch.no_grad()
