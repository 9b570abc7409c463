"""Nested frozen-dataclass configs from YAML plus dotted command-line overrides.

    cfg = load_config(RLConfig, "configs/lat.yaml", ["rollout.group_size=8", "optim.lr=1e-6"])

A file may start from another with ``base: PATH`` (relative to the file): the base is read first
and the file's own keys merged over it, section by section (``configs/tiny/*.yaml`` are the
recipes with small sizes this way). Unknown keys are errors with a "did you mean"; values are
checked against the field types (int, float, str, bool, Literal, tuples, optional, nested
dataclasses). Components are chosen by registry name in a config, never by import path.
``dump_config`` writes the resolved config next to every checkpoint and result.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml

from evidra.errors import ConfigError

T = TypeVar("T")


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``): each alias repeats a whole node, so a
    few lines of nested aliases expand to billions of values (a "billion laughs" file)."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise ConfigError(
                f"YAML alias *{event.anchor} at line {event.start_mark.line + 1}: evidra reads no YAML "
                "aliases; write the value out"
            )
        return super().compose_node(parent, index)


def read_yaml(text: str, source: str) -> Any:
    """Parse YAML ``text`` with the safe loader and no aliases; ``source`` names it in errors.

    >>> read_yaml("optim: {lr: 1.0e-6}", "recipe.yaml")
    {'optim': {'lr': 1e-06}}
    """
    try:
        loader = _NoAliasLoader(text)  # what yaml.load does, with the safe loader that refuses aliases
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()
    except ConfigError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source} is not valid YAML: {' '.join(str(exc).split())}") from exc


def _coerce(value: Any, tp: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _coerce(value, arg, where)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0] if len(errors) == 1 else f"{where}: {value!r} fits none of {tp}")
    if origin is typing.Literal:
        if value not in args:
            raise ConfigError(f"{where} must be one of {', '.join(map(repr, args))}, got {value!r}")
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping of {tp.__name__} fields, got {value!r}")
        return from_dict(tp, value, where)
    if origin in (tuple, list, Sequence):
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where} must be a list, got {value!r}")
        inner = args[0] if args else Any
        return tuple(_coerce(v, inner, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (dict, Mapping):
        if not isinstance(value, Mapping):
            raise ConfigError(f"{where} must be a mapping, got {value!r}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where} must be true or false, got {value!r}")
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if tp in (int, str) and isinstance(value, tp) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{where} must be {getattr(tp, '__name__', tp)}, got {value!r}")


def from_dict(cls: type[T], data: Mapping[str, Any], where: str = "") -> T:
    """Build the dataclass ``cls`` from a nested mapping, checking keys and types."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(fields)}"
            raise ConfigError(f"unknown config key {path!r}{hint}")
        kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc}") from exc


def to_dict(obj: Any) -> Any:
    """A plain nested dict/list version of a config (for YAML and JSON)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML scalars/lists) to a nested dict."""
    out = copy.deepcopy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"override {item!r} must look like section.key=value")
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r}: {part!r} is not a section")
        node[parts[-1]] = read_yaml(raw, f"override {item!r}") if raw.strip() else ""
    return out


def merge_sections(base: Mapping[str, Any], over: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """``base`` with ``over`` merged in, recursively for nested mappings.

    >>> merge_sections({"optim": {"lr": 1e-6, "weight_decay": 0.01}}, {"optim": {"lr": 5e-7}})
    {'optim': {'lr': 5e-07, 'weight_decay': 0.01}}
    """
    out = dict(base)
    for key, value in over.items():
        here = f"{where}.{key}" if where else str(key)
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge_sections(out[key], value, here)
        else:
            out[key] = value
    return out


BASE_KEY = "base"


def read_config_file(path: str | Path, seen: tuple[Path, ...] = ()) -> dict[str, Any]:
    """The mapping of YAML file ``path``, merged over the file its ``base:`` names (recursively)."""
    file = Path(path)
    if not file.is_file():
        where = f" (base of {seen[-1]})" if seen else ""
        raise ConfigError(f"config file {str(file)!r}{where} does not exist")
    if file.resolve() in seen:
        raise ConfigError(
            f"config file {str(file)!r} names itself as a base (through {seen[-1]}); break the cycle"
        )
    data = read_yaml(file.read_text(), f"config file {str(file)!r}") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(file)!r} must hold a mapping at the top level")
    base = data.pop(BASE_KEY, None)
    if base is None:
        return data
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{BASE_KEY}: in {str(file)!r} must name a config file, got {base!r}")
    return merge_sections(read_config_file(file.parent / base, (*seen, file.resolve())), data)


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Read ``path`` (YAML) if given, apply dotted ``overrides``, and build ``cls``.

    A class naming ``__stage_sections__`` (e.g. the SFT stage's ``("sft",)``) has each such
    section of the file merged over the rest before the overrides: one recipe file serves
    several stages.
    """
    data = read_config_file(path) if path is not None else {}
    for section in getattr(cls, "__stage_sections__", ()):
        stage = data.get(section) or {}
        if not isinstance(stage, Mapping):
            raise ConfigError(f"config section {section!r} must be a mapping of overrides, got {stage!r}")
        data = merge_sections(data, stage)
    return from_dict(cls, apply_overrides(data, overrides))


def dump_config(cfg: Any, path: str | Path) -> Path:
    """Write the resolved config as YAML."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return out
