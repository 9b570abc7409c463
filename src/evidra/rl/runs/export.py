"""Export a training run or checkpoint as a Hugging Face model directory.

A checkpoint holds only what trained (the LoRA adapter, or the non-frozen tensors). Export
rebuilds the policy from the checkpoint's ``config.yaml`` (``model`` section: base path, dtype,
LoRA), loads those tensors and writes a directory that ``transformers``, ``load_vlm`` and every
``--model`` option load directly: ``config.json``, safetensors weights (LoRA merged in) and the
base model's processor, tokenizer and chat-template files, copied unchanged so that stock
loaders read them. ``adapter_only=True`` writes the PEFT adapter alone instead
(``adapter_config.json`` + ``adapter_model.safetensors``, its base recorded as an absolute path).
The run's resolved config is written beside it as ``evidra_config.yaml``.

    evidra export runs/lat ckpt/lat-7b          # newest complete checkpoint of the run
    evidra eval --model runs/lat/checkpoints/step-000200 ...   # exported once into <ckpt>/hf/
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.config import from_dict, parse_yaml
from evidra.core.errors import CheckpointError, ConfigError, InvalidInputError, ModelLoadError
from evidra.rl.run_config import ModelConfig
from evidra.rl.runs.checkpoint import list_checkpoints, load_trainable_weights
from evidra.rl.runs.model_card import CARD, CardInput, MethodFacts, model_card
from evidra.safeio.jsonfiles import read_capped_text
from evidra.safeio.staging import give_default_modes

if TYPE_CHECKING:
    import torch

    from evidra.models.loading import VLM

logger = logging.getLogger(__name__)

PROVENANCE = "evidra_config.yaml"  # the run's resolved config, beside every export
CACHE_NAME = "hf"  # ``resolve_trained_model`` exports a checkpoint once into <checkpoint>/hf/
# files of the base directory that the exported weights replace, never copied
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".index.json")
_MODEL_FILES = ("config.json", "generation_config.json")


@dataclass(frozen=True)
class TrainedCheckpoint:
    """A checkpoint folder with the facts export needs from it."""

    folder: Path  # runs/X/checkpoints/step-000010
    model: ModelConfig  # the ``model`` section of its resolved config
    cache_dir: Path  # where ``tiny:<arch>`` base models of its run are built

    @property
    def config_file(self) -> Path:
        return self.folder / "config.yaml"


def _is_checkpoint(path: Path) -> bool:
    return (path / "state.json").is_file() and (path / "config.yaml").is_file()


def find_checkpoint(source: str | Path) -> Path:
    """The checkpoint folder ``source`` names: itself, or a run's newest complete checkpoint."""
    path = Path(source)
    if not path.is_dir():
        raise InvalidInputError(
            f"{str(path)!r} does not exist; pass a training run folder (run.output_dir) or one of its "
            "checkpoints/step-* folders"
        )
    if _is_checkpoint(path):
        return path
    if (path / "checkpoints").is_dir() or (path / "metrics.jsonl").is_file():
        found = list_checkpoints(path)
        if not found:
            raise CheckpointError(
                f"run {str(path)!r} has no complete checkpoint yet; train until one is saved "
                "(run.save_every, or the last step)"
            )
        return found[-1]
    raise InvalidInputError(
        f"{str(path)!r} is neither a training run (no checkpoints/) nor a checkpoint (no state.json); "
        "pass run.output_dir of a training run or one of its checkpoints/step-* folders"
    )


def read_checkpoint(source: str | Path) -> TrainedCheckpoint:
    """Locate the checkpoint of ``source`` and read the model section of its config."""
    folder = find_checkpoint(source)
    config_file = folder / "config.yaml"
    try:
        data = parse_yaml(read_capped_text(config_file, "checkpoint config"), str(config_file)) or {}
        section = (data.get("model") or {}) if isinstance(data, dict) else None
        if not isinstance(section, Mapping):
            raise ConfigError("it holds no model section")
        model = from_dict(ModelConfig, section, "model")
    except (OSError, ConfigError, AttributeError) as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(
            f"{config_file} is not a readable training config ({reason}); restore the run's config.yaml"
        ) from exc
    run = folder.parent.parent if folder.parent.name == "checkpoints" else folder.parent
    return TrainedCheckpoint(folder, model, run / "models")


def base_model_dir(ckpt: TrainedCheckpoint) -> Path:
    """The base checkpoint the run trained from (built again for ``tiny:<arch>``)."""
    from evidra.models.references import looks_like_hub_id
    from evidra.rl.policy import resolve_model_path

    problem = (
        f"base model {ckpt.model.path!r} of checkpoint {ckpt.folder} (model.path in its config.yaml) "
        "is not a model directory here; run from the folder training ran in, or put the base there"
    )
    try:
        base = Path(resolve_model_path(ckpt.model.path, ckpt.cache_dir))
    except ModelLoadError as exc:
        if looks_like_hub_id(ckpt.model.path):  # the hub's own reason (not cached offline, say)
            raise ModelLoadError(f"checkpoint {ckpt.folder}: {exc}") from None
        base = relocated(ckpt.model.path, ckpt.folder) or Path(ckpt.model.path)
    if not (base / "config.json").is_file():
        raise ModelLoadError(problem)
    return base


def relocated(recorded: str, checkpoint: Path) -> Path | None:
    """Where a base model recorded at ``recorded`` lies now that the run moved with it: the
    shortest tail of ``recorded`` found under a folder holding the checkpoint (nearest first),
    e.g. ``/old/proj/ckpt/base`` as ``/new/proj/ckpt/base`` for ``/new/proj/runs/lat/...``."""
    parts = Path(recorded).parts
    tails = [Path(*parts[-n:]) for n in range(1, len(parts) + 1) if parts[-n] not in ("/", "..", ".")]
    for folder in checkpoint.resolve().parents:
        for tail in tails:
            candidate = folder / tail
            if (candidate / "config.json").is_file():
                logger.warning(
                    "base model %s is not there; using %s, found beside the moved run", recorded, candidate
                )
                return candidate
    return None


def _load_weights_into(model: torch.nn.Module, ckpt: TrainedCheckpoint) -> None:
    """Copy the checkpoint's trainable tensors into the rebuilt policy, checking they fit."""
    import torch

    weights = load_trainable_weights(ckpt.folder)
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    lora = "on" if ckpt.model.lora.enabled else "off"
    problem = ""
    if unknown := sorted(set(weights) - set(params)):
        problem = f"it has {unknown[0]}, which the model lacks"
    elif absent := sorted(set(params) - set(weights)):
        problem = f"it lacks {absent[0]}, which the model trains"
    elif bad := [n for n, v in weights.items() if tuple(v.shape) != tuple(params[n].shape)]:
        problem = (
            f"{bad[0]} has shape {tuple(weights[bad[0]].shape)}, the model {tuple(params[bad[0]].shape)}"
        )
    if problem:
        raise CheckpointError(
            f"checkpoint {ckpt.folder} does not fit the model its config.yaml describes (model.path="
            f"{ckpt.model.path!r}, LoRA {lora}): {problem}; export with the run's own config.yaml and base"
        )
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value)


def rebuild_policy(ckpt: TrainedCheckpoint) -> VLM:
    """The trained policy (``VLM``) of a checkpoint, on CPU, in the run's dtype."""
    from evidra.rl.policy import load_policy

    base = base_model_dir(ckpt)
    cfg = replace(ckpt.model, path=str(base), gradient_checkpointing=False)
    vlm = load_policy(cfg, ckpt.cache_dir)
    _load_weights_into(vlm.model, ckpt)
    return vlm


def copy_processor_files(base: Path, out: Path) -> None:
    """Processor, tokenizer and chat-template files of the base, in its (stock) layout.

    Saving evidra's image-only processor would name its private class in the files, which
    stock loaders (``AutoProcessor``, vLLM) cannot resolve; training never changes them.
    """
    for file in sorted(base.iterdir()):
        if not file.is_file() or file.name in _MODEL_FILES or file.name.endswith(_WEIGHT_SUFFIXES):
            continue
        if file.name.startswith(".") or (out / file.name).exists():
            continue
        shutil.copy2(file, out / file.name)


def _apply_pixel_limits(out: Path, model: ModelConfig) -> None:
    """Record the image limits the run trained with (``model.min_pixels``/``max_pixels``)."""
    path = out / "preprocessor_config.json"
    if (model.min_pixels is None and model.max_pixels is None) or not path.is_file():
        return
    data = json.loads(read_capped_text(path, "processor config"))
    size = data.get("size") if isinstance(data.get("size"), dict) else None
    for key, edge, value in (
        ("min_pixels", "shortest_edge", model.min_pixels),
        ("max_pixels", "longest_edge", model.max_pixels),
    ):
        if value is not None:
            data[key] = value
            if size is not None:
                size[edge] = value
    path.write_text(json.dumps(data, indent=2))


def _write_merged(vlm: VLM, ckpt: TrainedCheckpoint, base: Path, out: Path) -> None:
    import torch

    from evidra.models.adapters import merge_lora

    merged = merge_lora(vlm) if ckpt.model.lora.enabled else vlm
    # training keeps fp32 masters of a bf16 run; the exported model is in the run's dtype
    merged.model.to(getattr(torch, ckpt.model.dtype))
    merged.model.save_pretrained(out)
    copy_processor_files(base, out)
    _apply_pixel_limits(out, ckpt.model)


def _write_adapter(vlm: VLM, ckpt: TrainedCheckpoint, base: Path, out: Path) -> None:
    if not ckpt.model.lora.enabled:
        raise InvalidInputError(
            f"checkpoint {ckpt.folder} trained without LoRA (model.lora.enabled=false), so there is no "
            "adapter to export; export the full model (without --adapter)"
        )
    for config in vlm.model.peft_config.values():  # loaders find the base by this path
        config.base_model_name_or_path = str(base.resolve())
    vlm.model.save_pretrained(out)


def check_export_target(out: Path) -> None:
    """Only an earlier evidra export may be replaced, never a folder of something else."""
    if out.exists() and not (out / PROVENANCE).is_file():
        raise InvalidInputError(
            f"{str(out)!r} exists and is not an evidra export; remove it or choose another folder"
        )


def _publish(tmp: Path, out: Path) -> None:
    """Move a finished export into place, replacing an earlier export."""
    check_export_target(out)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def export_model(
    source: str | Path,
    out_dir: str | Path,
    *,
    adapter_only: bool = False,
    method_facts: Callable[[Mapping[str, object]], MethodFacts | None] | None = None,
) -> Path:
    """Write the trained model of a run or checkpoint ``source`` as a model directory ``out_dir``.

    ``source`` is a run folder (its newest complete checkpoint is used) or a checkpoint folder.
    The directory is written under a temporary name and renamed when complete, with a model
    card ``README.md``; ``method_facts`` (``evidra.methods.method_facts``) names the method of
    the run's config and its paper there. Every file gets the modes the umask gives new files.
    """
    out = Path(out_dir)
    check_export_target(out)
    ckpt = read_checkpoint(source)
    base = base_model_dir(ckpt)
    vlm = rebuild_policy(ckpt)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".tmp-{out.name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        (_write_adapter if adapter_only else _write_merged)(vlm, ckpt, base, tmp)
        shutil.copy2(ckpt.config_file, tmp / PROVENANCE)
        card = CardInput.of(ckpt.folder, tmp / PROVENANCE, base, str(out_dir), adapter_only, method_facts)
        (tmp / CARD).write_text(model_card(card), encoding="utf-8")  # replaces a base model's card
        give_default_modes(tmp)  # world-readable as the user's other files (safetensors writes 0o600)
        _publish(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("exported %s (%s) to %s", ckpt.folder, "adapter" if adapter_only else "merged", out)
    return out


def _is_complete_export(path: Path) -> bool:
    return (
        (path / "config.json").is_file() and (path / PROVENANCE).is_file() and any(path.glob("*.safetensors"))
    )


def resolve_trained_model(path: str | Path) -> str:
    """A directory ``load_vlm`` can open, for any ``--model`` argument.

    A model directory (``config.json``) is returned as is, a hub id or ``tiny:ARCH`` resolved
    (``evidra.models.references``); a run or checkpoint folder is
    exported once into ``<checkpoint>/hf/`` (reused while complete) and that path returned.
    """
    root = Path(path)
    if (root / "config.json").is_file():
        return str(path)
    if (root / "adapter_config.json").is_file():
        raise InvalidInputError(
            f"{str(root)!r} is a LoRA adapter, not a model; pass the run or checkpoint it came from, "
            "or export a merged model with `evidra export RUN DIR`"
        )
    if not str(path).strip():
        raise InvalidInputError(
            "no model given; pass --model DIR: a model directory, a training run or one of its checkpoints"
        )
    if not root.exists():
        from evidra.models.references import TINY_PREFIX, parse_hub_id, resolve_model_ref

        if str(path).startswith(TINY_PREFIX) or parse_hub_id(str(path)) is not None:
            return str(resolve_model_ref(path, "Qwen-VL model"))
        raise InvalidInputError(
            f"--model {str(root)!r} does not exist; pass a model directory (with config.json), a "
            "training run folder or one of its checkpoints, a hub id (org/name) or tiny:ARCH"
        )
    try:
        folder = find_checkpoint(root)
    except InvalidInputError:
        raise InvalidInputError(
            f"--model {str(root)!r} is neither a model directory (no config.json) nor a training run or "
            "checkpoint; pass one of them"
        ) from None
    target = folder / CACHE_NAME
    if not _is_complete_export(target):
        export_model(folder, target)
    return str(target)
