"""The cold start before RL: the base model fine-tuned on the task's oracle conversations.

The papers start RL from an SFT checkpoint: a model that never writes the answer format earns
one reward in every group, so every group-relative advantage is 0 and RL learns nothing. A
recipe asks for the cold start under ``model``:

    model:
      path: tiny:qwen2_5_vl
      cold_start:            # SFT on the task's oracle answers, then RL from the result
        steps: 150
        batch_size: 8
        lr: 5.0e-3
        data: {synthetic: [reading], size: 256, seed: 1}

``train rl`` then fine-tunes ``model.path`` for ``steps`` steps on the oracle conversations of the
recipe's task over ``cold_start.data`` (full fine-tuning at the run's dtype and pixel limits) and
trains RL from the exported result. With ``vision_steps`` the vision tower is first warmed on the
data's pages (``evidra.models.vision_warmup``: which character sits in each patch, read from the
text layer) and stays frozen in the SFT; without, the SFT trains every weight, tower included. The
result is built once and cached: ``<cache>/cold-start/<task>-<key>``, where ``<cache>`` is the
folder the tiny models are built in (``$XDG_CACHE_HOME/evidra/tiny``) and ``<key>`` a hash of
everything that determines it (the base model reference, the method section, the pixel limits and
dtype, the ``cold_start`` section and evidra's version). A later run with the same inputs reuses it.

A cached folder is read back only after it checks out: it holds regular files only, each named in
its ``cold_start.json`` manifest with its size and SHA-256, none a pickle format (weights are
safetensors), and the manifest's key is the one this run computes. Anything else is one warning
line and a rebuild.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import shutil
import time
from dataclasses import dataclass, replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from evidra.core.config import to_dict
from evidra.core.errors import ConfigError, EvidraError
from evidra.core.jsonvalue import JSON
from evidra.models.references import recorded_ref
from evidra.rl.run_config import ColdStartConfig, OptimConfig, RLConfig, RunConfig, SFTConfig
from evidra.rl.tasks import Task, task_samples
from evidra.rl.validate import check_cold_start
from evidra.safeio.cache import private_cache_dir
from evidra.safeio.jsonfiles import parse_json, read_capped_text

logger = logging.getLogger(__name__)

MANIFEST = "cold_start.json"
# what an exported model directory holds; a pickle format (.bin, .pt, .pth, .pkl, .ckpt) never loads
ALLOWED_SUFFIXES = (".json", ".safetensors", ".jinja", ".txt", ".md", ".yaml", ".model", ".tiktoken")
_CHUNK = 1 << 20


@dataclass(frozen=True)
class ColdStart:
    """A cold-start model folder and what its build measured."""

    folder: Path
    key: str
    steps: int
    loss_first: float
    loss_last: float
    seconds: float  # the SFT's wall time when it was built


def cache_root() -> Path:
    """Where cold starts are cached: beside the tiny models (``<private cache>/tiny/cold-start``)."""
    return private_cache_dir("or set XDG_CACHE_HOME to a folder of your own") / "tiny" / "cold-start"


def world_size() -> int:
    """The processes of a launched run (``WORLD_SIZE``, which ``accelerate launch`` and ``torchrun``
    set), before any accelerator exists; 1 otherwise."""
    text = os.environ.get("WORLD_SIZE", "1")
    return int(text) if text.isdigit() else 1


def evidra_version() -> str:
    try:
        return version("evidra")
    except PackageNotFoundError:
        return "unknown"


def cold_start_key(cfg: RLConfig) -> str:
    """A hash of everything that determines the cold start of ``cfg`` (64 hex digits)."""
    inputs = {
        "evidra": evidra_version(),
        "base": recorded_ref(cfg.model.path),
        "method": to_dict(cfg.method),
        "task": cfg.data.task if not cfg.method else "",
        "pixels": [cfg.model.min_pixels, cfg.model.max_pixels],
        "dtype": cfg.model.dtype,
        "cold_start": to_dict(cfg.model.cold_start),
    }
    text = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def sft_config(cfg: RLConfig, out: Path, base: Path | None = None) -> SFTConfig:
    """The SFT run of ``cfg``'s cold start, written into ``out``, from ``base`` (a warmed model
    folder, whose tower the SFT keeps frozen) or ``model.path`` (every weight trained)."""
    cold = cfg.model.cold_start
    model = replace(
        cfg.model,
        path=str(base) if base is not None else cfg.model.path,
        cold_start=ColdStartConfig(),
        lora=replace(cfg.model.lora, enabled=False),
        freeze_vision=base is not None,
        gradient_checkpointing=False,
    )
    optim = OptimConfig(lr=cold.lr, schedule="cosine", warmup_steps=cold.warmup_steps, max_grad_norm=1.0)
    run = RunConfig(
        output_dir=str(out),
        steps=cold.steps,
        batch_size=cold.batch_size,
        micro_batch_size=cold.batch_size,
        seed=cold.seed,
        save_every=0,
        keep_checkpoints=1,
        resume=False,
    )
    data = replace(cold.data, task=cfg.data.task)
    return SFTConfig(method=dict(cfg.method), model=model, data=data, optim=optim, run=run)


def with_cold_start(cfg: RLConfig, task: Task, processes: int = 1) -> tuple[RLConfig, ColdStart | None]:
    """``cfg`` with ``model.path`` at its cold-start model (built now unless cached), and the
    cold start; ``cfg`` unchanged and None when ``model.cold_start.steps`` is 0."""
    cold = cfg.model.cold_start
    check_cold_start(cold, task)
    if not cold.steps:
        return cfg, None
    key = cold_start_key(cfg)
    folder = cache_root() / f"{_safe(task.name)}-{key[:16]}"
    built = read_cached(folder, key)
    if built is None:
        if processes > 1:
            raise ConfigError(
                f"the cold start {folder} is not built yet and {processes} processes would each build it; "
                "run the recipe once on one process first (it is cached), then launch"
            )
        built = build(cfg, task, folder, key)
    return replace(cfg, model=replace(cfg.model, path=str(built.folder))), built


def _safe(name: str) -> str:
    """``name`` as a folder-name part: letters, digits, '.', '_' and '-' only."""
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in name).strip(".") or "task"


def build(cfg: RLConfig, task: Task, folder: Path, key: str) -> ColdStart:
    """SFT the base model, export it beside ``folder`` and publish it there with one rename."""
    from evidra.rl.sft.finetune import SFTTrainer

    root = folder.parent
    root.mkdir(parents=True, exist_ok=True)
    work = root / f".tmp-{folder.name}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    logger.info(
        "cold start: %d SFT steps of %s on %s (cached in %s)",
        cfg.model.cold_start.steps,
        cfg.model.path,
        task.name,
        folder,
    )
    start = time.perf_counter()
    try:
        warmed = warm_vision(cfg, task, work) if cfg.model.cold_start.vision_steps else None
        trainer = SFTTrainer(sft_config(cfg, work / "run", warmed), task=task)
        losses = [m["loss"] for m in trainer.train()]
        model = trainer.export(work / "model")
        seconds = time.perf_counter() - start
        made = ColdStart(folder, key, len(losses), losses[0], losses[-1], seconds)
        write_manifest(model, made)
        if folder.is_symlink():  # a planted link is replaced, never followed
            folder.unlink()
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(model, folder)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    logger.info(
        "cold start: SFT loss %.3f -> %.3f over %d steps in %.0f s",
        made.loss_first,
        made.loss_last,
        made.steps,
        seconds,
    )
    return made


def warm_vision(cfg: RLConfig, task: Task, work: Path) -> Path:
    """The base model with its vision tower warmed on the cold start's pages (their text layers),
    written to ``work/warm``: the warmed weights and the base's processor files, as an export."""
    from evidra.models.loading import load_vlm
    from evidra.models.references import resolve_model_ref
    from evidra.models.vision_warmup import warm_up_vision
    from evidra.rl.runs.export import copy_processor_files

    cold = cfg.model.cold_start
    base = resolve_model_ref(cfg.model.path, tiny_cache=work / "models")
    vlm = load_vlm(base, min_pixels=cfg.model.min_pixels, max_pixels=cfg.model.max_pixels)
    pages = [
        page for sample in task_samples(task, replace(cold.data, task=cfg.data.task)) for page in sample.pages
    ]
    start = time.perf_counter()
    losses = warm_up_vision(vlm, pages, steps=cold.vision_steps, lr=cold.vision_lr, seed=cold.seed)
    logger.info(
        "cold start: vision warm-up loss %.3f -> %.3f over %d steps in %.0f s",
        losses[0],
        losses[-1],
        len(losses),
        time.perf_counter() - start,
    )
    warm = work / "warm"
    vlm.model.save_pretrained(warm)
    copy_processor_files(base, warm)
    return warm


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def write_manifest(folder: Path, made: ColdStart) -> None:
    """``cold_start.json``: the key, the measurements and every file's size and SHA-256."""
    files = {p.name: {"size": p.stat().st_size, "sha256": _sha256(p)} for p in sorted(folder.iterdir())}
    record = {
        "key": made.key,
        "evidra": evidra_version(),
        "steps": made.steps,
        "loss_first": made.loss_first,
        "loss_last": made.loss_last,
        "seconds": made.seconds,
        "files": files,
    }
    (folder / MANIFEST).write_text(json.dumps(record, indent=2), encoding="utf-8")


def read_cached(folder: Path, key: str) -> ColdStart | None:
    """The cold start cached in ``folder`` when it checks out; None when there is none, or (with
    one warning line) when it does not."""
    if not folder.exists() and not folder.is_symlink():
        return None
    try:
        return _checked(folder, key)
    except (EvidraError, OSError, TypeError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        logger.warning("cold start cache %s is not usable (%s); building it again", folder, exc)
        return None


def _checked(folder: Path, key: str) -> ColdStart:
    if folder.is_symlink() or not folder.is_dir():
        raise ValueError("not a folder")
    record = parse_json(read_capped_text(folder / MANIFEST, "cold start manifest"), str(folder / MANIFEST))
    if not isinstance(record, dict) or record.get("key") != key:
        raise ValueError("its manifest is for other inputs")
    files = record.get("files")
    if not isinstance(files, dict):
        raise ValueError("its manifest lists no files")
    present = {p.name for p in folder.iterdir()} - {MANIFEST}
    if present != set(files):
        extra = sorted(present ^ set(files))
        raise ValueError(f"its files differ from the manifest's ({extra[0]!r})")
    for name, entry in files.items():
        _check_file(folder, name, entry)
    return ColdStart(
        folder,
        key,
        int(_number(record.get("steps", 0), "steps")),
        _number(record.get("loss_first"), "loss_first"),
        _number(record.get("loss_last"), "loss_last"),
        _number(record.get("seconds"), "seconds"),
    )


def _number(value: JSON, field: str) -> float:
    """A manifest's number (a missing one reads as NaN); anything else is a broken manifest."""
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"its manifest's {field} is not a number")
    return float(value)


def _check_file(folder: Path, name: str, entry: Any) -> None:
    if not name.endswith(ALLOWED_SUFFIXES) or "/" in name or name.startswith("."):
        raise ValueError(f"file {name!r} is no model, tokenizer or config file")
    path = folder / name
    if path.is_symlink() or not path.is_file():
        raise ValueError(f"{name!r} is not a regular file")
    if not isinstance(entry, dict) or entry.get("size") != path.stat().st_size:
        raise ValueError(f"{name!r} has another size than its manifest says")
    if entry.get("sha256") != _sha256(path):
        raise ValueError(f"{name!r} has another content than its manifest says")
