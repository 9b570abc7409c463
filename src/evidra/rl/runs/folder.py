"""A run folder holds one run: its base model, method, trainable shapes and config are checked on
every start.

``evidra train sft|rl`` resumes from the newest checkpoint in ``run.output_dir``. A start in the
folder of another run (another base model, method or recipe) would load that run's weights onto
its own model and describe itself with the other run's files, so the first start writes
``run.json`` beside ``config.yaml`` and every later start checks, cheapest first:

1. before anything loads (``RunFolder.open``): the kind of training (sft or rl), the method and
   the base model's reference against ``run.json``, and the config against ``config.yaml``: every
   key equal except those a resume may change (``RESUMABLE``: steps, checkpoint cadence, logging,
   micro-batch size, activation checkpointing, the folder's own path);
2. once the base model's folder is found, before its weights load (``RunFolder.base_folder``): its
   fingerprint (``evidra.retrieval.lifecycle.fingerprint``: file names and sizes, small files whole, both ends
   of the weight files; the same weights moved to another local path pass);
3. once the policy is built, before a checkpoint loads (``RunFolder.check_shapes``): the names and
   shapes of the tensors that train.

A difference is one ``ConfigError`` naming the recorded value, this start's, and the fix. Both
files are written once, by the first start, and never rewritten: a resume that changes an allowed
key (``run.steps=20``) logs it, and each checkpoint's own ``config.yaml`` holds the values it was
saved with. A folder from before ``run.json`` existed resumes with a warning: its ``config.yaml``
is compared all the same (``model.path`` included) and the loader checks the checkpoint's shapes;
only its base model's bytes cannot be compared, and the record is written from this start.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml

from evidra.core.config import MAX_CONFIG_BYTES, parse_yaml, to_dict
from evidra.core.errors import ConfigError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.models.references import recorded_ref
from evidra.retrieval.lifecycle.fingerprint import fingerprint, short
from evidra.rl.policy import resolve_model_path
from evidra.rl.runs.checkpoint import dump_run_config, list_checkpoints
from evidra.safeio.jsonfiles import parse_json

if TYPE_CHECKING:
    import torch

    from evidra.rl.run_config import RLConfig, SFTConfig

logger = logging.getLogger(__name__)

Kind = Literal["rl", "sft"]
RUN_RECORD = "run.json"
RUN_CONFIG = "config.yaml"
FORMAT = 1
MAX_RECORD_BYTES = 4 << 20  # a record is a few KB: a name and a shape per trained tensor
MAX_TENSORS = 100_000
_FINGERPRINT = re.compile(r"(sha256:[0-9a-f]{64})?")
_SHOWN = 80  # characters of a value shown in a message
_ABSENT = object()  # a key one of two configs lacks
# keys a resume may change (a key or a whole section): they change how long the run goes, how
# often it saves and logs, and how a step is split in memory, not what trains or on what
_RESUMABLE_RUN = frozenset(
    {
        "run.steps",
        "run.save_every",
        "run.keep_checkpoints",
        "run.max_bad_steps",
        "run.resume",
        "run.report_to",
        "run.wandb_project",
        "run.micro_batch_size",
        "run.output_dir",
        "model.gradient_checkpointing",
        "model.path",  # compared by the record: the same base may have moved (its fingerprint decides)
    }
)
RESUMABLE: dict[Kind, frozenset[str]] = {
    "rl": _RESUMABLE_RUN | {"sft"},  # the SFT stage's section, unused by RL
    "sft": _RESUMABLE_RUN | {"epochs", "rollout", "algo", "judge", "reward", "sft"},  # unused by SFT
}


@dataclass(frozen=True)
class RunRecord:
    """What a run folder trained (``run.json``)."""

    kind: Kind
    method: str  # method.name, else data.task
    base: str  # model.path as recorded (``recorded_ref``: a local path absolute)
    base_fingerprint: str  # of the base model's folder; "" until known
    trainable: tuple[tuple[str, tuple[int, ...]], ...]  # (name, shape) of each trained tensor, by name

    def to_json(self) -> str:
        body = {
            "format": FORMAT,
            "kind": self.kind,
            "method": self.method,
            "base": self.base,
            "base_fingerprint": self.base_fingerprint,
            "trainable": [[name, list(shape)] for name, shape in self.trainable],
        }
        return json.dumps(body, indent=1)


def method_of(cfg: RLConfig | SFTConfig) -> str:
    """The method a config trains: ``method.name``, else the plain task ``data.task``."""
    section = cfg.method if isinstance(cfg.method, Mapping) else {}
    return str(section.get("name") or cfg.data.task)


def trainable_shapes(model: torch.nn.Module) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(name, full shape) of each trainable parameter, by name (ZeRO-3 keeps the shape aside)."""
    shapes = [
        (name, tuple(int(d) for d in (getattr(p, "ds_shape", None) or p.shape)))
        for name, p in model.named_parameters()
        if p.requires_grad
    ]
    return tuple(sorted(shapes))


def read_record(out: Path) -> RunRecord | None:
    """The ``run.json`` of run folder ``out``; None when there is none. Anything but a record
    evidra wrote (oversized, not JSON, other fields or types) is one ``ConfigError``."""
    path = out / RUN_RECORD
    if not path.exists() and not path.is_symlink():
        return None
    data = parse_json(_read_capped(path, MAX_RECORD_BYTES), f"run record {str(path)!r}", ConfigError)
    record = _parse_record(data)
    if isinstance(record, str):
        raise ConfigError(
            f"run record {str(path)!r} is not one evidra writes ({record}); use a new run.output_dir, "
            "or delete the file to resume this folder unchecked"
        )
    return record


def _read_capped(path: Path, cap: int) -> bytes:
    """At most ``cap`` bytes of the regular file ``path`` (a device or pipe is never opened)."""
    fix = "use a new run.output_dir, or delete the file"
    if not path.is_file():
        raise ConfigError(f"{str(path)!r} is not a regular file; {fix}")
    try:
        with path.open("rb") as fh:
            raw = fh.read(cap + 1)
    except OSError as exc:
        raise ConfigError(f"{str(path)!r} cannot be read ({exc.strerror or exc}); {fix}") from None
    if len(raw) > cap:
        raise ConfigError(f"{str(path)!r} is larger than {cap >> 20} MiB, more than evidra writes; {fix}")
    return raw


def _parse_record(data: JSON) -> RunRecord | str:
    """The run record ``data`` holds, or what makes it none."""
    if not isinstance(data, dict):
        return "not a JSON object"
    if data.get("format") != FORMAT:
        return f"format {_show(data.get('format'))}, expected {FORMAT}"
    kind = data.get("kind")
    if kind != "rl" and kind != "sft":
        return f"kind {_show(kind)}"
    method, base, base_fingerprint = (_text(data, key) for key in ("method", "base", "base_fingerprint"))
    for key, value in (("method", method), ("base", base), ("base_fingerprint", base_fingerprint)):
        if value is None:
            return f"{key} is not a string of at most 4096 characters"
    if base_fingerprint is None or not _FINGERPRINT.fullmatch(base_fingerprint):
        return f"base_fingerprint {_show(base_fingerprint)}"
    trainable = data.get("trainable")
    if not isinstance(trainable, list) or len(trainable) > MAX_TENSORS:
        return f"trainable is not a list of at most {MAX_TENSORS} tensors"
    entries = [_tensor_entry(item) for item in trainable]
    tensors = tuple(entry for entry in entries if entry is not None)
    if len(tensors) < len(entries):
        return "trainable holds an entry other than [name, [sizes]]"
    return RunRecord("rl" if kind == "rl" else "sft", str(method), str(base), base_fingerprint, tensors)


def _text(data: JSONObject, key: str) -> str | None:
    value = data.get(key)
    return value if isinstance(value, str) and len(value) <= 4096 else None


def _tensor_entry(item: JSON) -> tuple[str, tuple[int, ...]] | None:
    """``(name, shape)`` of a ``[name, [sizes]]`` entry; None for anything else."""
    if not (isinstance(item, list) and len(item) == 2 and isinstance(name := item[0], str)):
        return None
    shape = item[1]
    if not (isinstance(shape, list) and len(shape) <= 8):
        return None
    sizes = tuple(d for d in shape if type(d) is int and d >= 0)
    return (name, sizes) if len(sizes) == len(shape) else None


def read_run_config(out: Path) -> dict[str, object] | None:
    """The run's ``config.yaml`` as a mapping; None when there is none (capped, no YAML aliases)."""
    path = out / RUN_CONFIG
    if not path.exists() and not path.is_symlink():
        return None
    raw = _read_capped(path, MAX_CONFIG_BYTES)
    fix = "; use a new run.output_dir, or delete the file"
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"run config {str(path)!r} is not UTF-8 text{fix}") from None
    data = parse_yaml(text, f"run config {str(path)!r}", fix)
    if not isinstance(data, dict):
        raise ConfigError(f"run config {str(path)!r} does not hold a mapping{fix}")
    return data


def _show(value: object) -> str:
    """``value`` on one line, cut to ``_SHOWN`` characters (a recorded value may be hostile)."""
    text = "(absent)" if value is _ABSENT else repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."


def _leaves(data: Mapping[str, object], prefix: str = "") -> Iterator[tuple[str, object]]:
    """(dotted key, value) of every non-mapping value of ``data``, in order."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):  # an empty one has no leaf
            yield from _leaves(value, dotted + ".")
        else:
            yield dotted, value


def _plain(cfg: RLConfig | SFTConfig) -> dict[str, object]:
    """``cfg`` as its ``config.yaml`` reads back (tuples as lists)."""
    data: dict[str, object] = yaml.safe_load(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return data


def config_changes(
    recorded: Mapping[str, object], now: Mapping[str, object], defaults: Mapping[str, object]
) -> Iterator[tuple[str, object, object]]:
    """(key, recorded value, this start's) of every leaf that differs, this start's keys first. A key
    the recorded config lacks (a field added since it was written) counts as its default.

    >>> list(config_changes({"run": {"steps": 1}}, {"run": {"steps": 2, "seed": 0}}, {"run": {"seed": 0}}))
    [('run.steps', 1, 2)]
    """
    old, new, base = dict(_leaves(recorded)), dict(_leaves(now)), dict(_leaves(defaults))
    for key, value in new.items():
        before = old.get(key, base.get(key, _ABSENT))
        if before != value or type(before) is not type(value):
            yield key, before, value
    for key, value in old.items():
        if key not in new:
            yield key, value, _ABSENT


def _allowed(key: str, kind: Kind) -> bool:
    return any(key == k or key.startswith(k + ".") for k in RESUMABLE[kind])


def _key(key: str) -> str:
    """A dotted key as a message shows it (a key read from a file may hold anything)."""
    return key if key.isprintable() and len(key) <= _SHOWN else _show(key)


def _publish(path: Path, write: Callable[[Path], object]) -> None:
    """``write(tmp)`` then one rename onto ``path``: a reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    write(tmp)
    os.replace(tmp, path)


class RunFolder:
    """One start of a run in folder ``run.output_dir``: its checks (see the module docstring) and,
    for a fresh run, its record."""

    def __init__(
        self,
        cfg: RLConfig | SFTConfig,
        kind: Kind,
        recorded: RunRecord | None,
        recorded_config: dict[str, object] | None,
    ) -> None:
        self.cfg, self.kind = cfg, kind
        self.out = Path(cfg.run.output_dir)
        self.recorded, self.recorded_config = recorded, recorded_config
        self.method = method_of(cfg)
        self.base = recorded_ref(cfg.model.path) if cfg.model.path else ""
        self.fingerprint = ""  # of the base model's folder, once found
        self.trainable: tuple[tuple[str, tuple[int, ...]], ...] = ()
        self.where = f"run folder {str(self.out)!r}"

    @classmethod
    def open(cls, cfg: RLConfig | SFTConfig, kind: Kind) -> RunFolder:
        """Read the folder's record and config and check this start against them, before anything
        loads: a ``ConfigError`` names the first difference."""
        out = Path(cfg.run.output_dir)
        folder = cls(cfg, kind, read_record(out), read_run_config(out))
        folder._check_record()
        folder._check_config()
        return folder

    def _check_record(self) -> None:
        rec = self.recorded
        if rec is None:
            if self.recorded_config is not None or list_checkpoints(self.out):
                logger.warning(
                    "%s has no %s (it was written before evidra recorded a run's base model): its "
                    "config.yaml is compared, its base model's files cannot be; %s is written now",
                    self.where,
                    RUN_RECORD,
                    RUN_RECORD,
                )
            self._check_base_ref(self._config_base(), fingerprinted=False)
            return
        if rec.kind != self.kind:
            raise ConfigError(
                f"{self.where} holds a `train {rec.kind}` run, not `train {self.kind}`: its checkpoints "
                f"continue only that run; use a new run.output_dir for `train {self.kind}`"
            )
        if rec.method != self.method:
            raise ConfigError(
                f"{self.where} trained method {_show(rec.method)}, not {self.method!r}: a resume "
                f"continues the run's own method; use a new run.output_dir for {self.method!r}, or "
                f"resume with method {_show(rec.method)}"
            )
        self._check_base_ref(rec.base, fingerprinted=bool(rec.base_fingerprint))

    def _config_base(self) -> str | None:
        model = (self.recorded_config or {}).get("model")
        path = model.get("path") if isinstance(model, Mapping) else None
        if not isinstance(path, str) or not path:
            return None
        try:
            return recorded_ref(path)  # a relative path as older versions wrote it, made absolute
        except (OSError, ValueError):  # a hostile value (a NUL byte): compared as written
            return path

    def _check_base_ref(self, recorded: str | None, *, fingerprinted: bool) -> None:
        """The base model named now against the recorded one. Two local folders may hold the same
        weights (a base moved): with a recorded fingerprint, ``base_folder`` decides."""
        if recorded is None or recorded == self.base:
            return
        if fingerprinted and Path(recorded).is_absolute() and Path(self.base).is_absolute():
            return
        raise ConfigError(
            f"{self.where} trained from base model {_show(recorded)}, not {self.base!r} (model.path): "
            f"its checkpoints fit only that base; use a new run.output_dir to train {self.base!r}, "
            f"or resume with model.path={_show(recorded)}"
        )

    def _check_config(self) -> None:
        if self.recorded_config is None:
            return
        now, defaults = _plain(self.cfg), _plain(type(self.cfg)())
        changed = []
        for key, before, value in config_changes(self.recorded_config, now, defaults):
            if not _allowed(key, self.kind):
                fix = (
                    f"resume with {_key(key)}={_show(before)}"
                    if before is not _ABSENT
                    else "resume without it"
                )
                raise ConfigError(
                    f"{self.where} was started with {_key(key)}={_show(before)} (its config.yaml), "
                    f"not {_show(value)}: a resume continues the recorded run; {fix}, or use a new "
                    "run.output_dir (a resume may change only the steps, checkpointing, logging and "
                    "micro-batch settings)"
                )
            if key not in ("run.output_dir", "model.path"):
                changed.append(f"{key}={_show(value)} (was {_show(before)})")
        if changed:
            kept = "its config.yaml keeps the values it started with"
            logger.info("%s resumes with %s; %s", self.where, ", ".join(changed), kept)

    def base_folder(self, cache_dir: str | Path) -> Path:
        """The folder ``model.path`` names (a ``tiny:`` model built, a hub id fetched), its
        fingerprint compared with the recorded one before any weight loads."""
        folder = Path(resolve_model_path(self.cfg.model.path, cache_dir))
        if not (folder / "config.json").is_file():
            return folder  # no model folder: the loader refuses it, saying what it is
        self.fingerprint = fingerprint(folder)
        rec = self.recorded
        if rec is None or not rec.base_fingerprint:
            return folder
        if rec.base_fingerprint != self.fingerprint:
            raise ConfigError(
                f"{self.where} trained from base model {_show(rec.base)} (fingerprint "
                f"{short(rec.base_fingerprint)}), but model.path {self.base!r} has fingerprint "
                f"{short(self.fingerprint)} (other weights or files): its checkpoints fit only that base; "
                f"use a new run.output_dir to train this one, or resume with the base the run trained from"
            )
        if rec.base != self.base:
            logger.info("%s: base model %s moved to %s (same fingerprint)", self.where, rec.base, self.base)
        return folder

    def check_shapes(self, model: torch.nn.Module) -> None:
        """The names and shapes of ``model``'s trainable tensors against the recorded ones, before a
        checkpoint loads."""
        self.trainable = trainable_shapes(model)
        rec = self.recorded
        if rec is None or rec.trainable == self.trainable:
            return
        old, new = dict(rec.trainable), dict(self.trainable)
        name = next(n for n in sorted(old.keys() | new.keys()) if old.get(n) != new.get(n))

        def shape(of: dict[str, tuple[int, ...]]) -> str:
            return str(list(of[name])) if name in of else "(absent)"

        raise ConfigError(
            f"{self.where} trained {_key(name)} with shape {shape(old)}, this model's is {shape(new)} "
            f"({len(old)} trained tensors recorded, {len(new)} now): its checkpoints do not fit this "
            "model; use a new run.output_dir, or resume with the run's model.lora and freezing settings"
        )

    def write(self) -> None:
        """Write a fresh run's ``config.yaml`` and ``run.json``; files already there stay as they
        are. Only the main process calls this, after the checks."""
        self.out.mkdir(parents=True, exist_ok=True)
        if self.recorded_config is None:
            _publish(self.out / RUN_CONFIG, lambda tmp: dump_run_config(self.cfg, tmp))
        if self.recorded is None:
            record = RunRecord(self.kind, self.method, self.base, self.fingerprint, self.trainable)
            _publish(self.out / RUN_RECORD, lambda tmp: tmp.write_text(record.to_json()))
