"""Nested frozen-dataclass configs from YAML plus dotted command-line overrides.

    cfg = load_config(RLConfig, "configs/lat.yaml", ["rollout.group_size=8", "optim.lr=1e-6"])

A file may start from another with ``base: PATH`` (relative to the file): the base is read first
and the file's own keys merged over it, section by section (``configs/tiny/*.yaml`` are the
recipes with small sizes this way). A section tagged ``!replace`` (``method: !replace {name:
short_answer}``) takes the place of the base's section whole instead of merging into it; the tag
builds a plain marker in the safe loader, so it runs nothing.

Unknown keys are errors with a "did you mean" (a class's ``__replaced_keys__`` names the
successor of a retired key in its own section, ``__moved_keys__`` the full path of one that moved
to another section); values are checked against the field types (int, float, str, bool,
Literal, tuples, optional, nested dataclasses). Components are chosen by registry name in a
config, never by import path.
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

from evidra.core.errors import ConfigError

T = TypeVar("T")


def _coerce(value: object, tp: object, where: str) -> object:
    """``value`` as the annotation ``tp`` of a config field (a type, a union, a Literal...) wants it."""
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
        if isinstance(value, tp):  # already built (a config made in Python)
            return value
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
    if tp is str and isinstance(value, str):
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{where} must be {getattr(tp, '__name__', tp)}, got {value!r}")


def from_dict(cls: type[T], data: Mapping[str, object], where: str = "") -> T:
    """Build the dataclass ``cls`` from a nested mapping, checking keys and types."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}  # type: ignore[arg-type]
    replaced: Mapping[str, str] = getattr(cls, "__replaced_keys__", {})  # retired key -> its successor
    moved: Mapping[str, str] = getattr(cls, "__moved_keys__", {})  # retired key -> its full new path
    kwargs = {}
    for key, value in data.items():
        path = f"{where}.{key}" if where else str(key)
        if key in replaced:
            raise ConfigError(
                f"config key {path!r} was replaced; did you mean {_sibling(path, replaced[key])}?"
            )
        if key in moved:
            raise ConfigError(f"config key {path!r} was replaced; did you mean {moved[key]!r}?")
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; known keys: {', '.join(fields)}"
            raise ConfigError(f"unknown config key {path!r}{hint}")
        kwargs[key] = _coerce(value, hints[key], path)
    try:
        return cls(**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{where or cls.__name__}: {exc}") from exc


def _sibling(path: str, key: str) -> str:
    """``key`` in the section of ``path``: ``run.tensorboard`` and ``report_to=[...]`` give
    ``run.report_to=[...]``."""
    section = path.rpartition(".")[0]
    return f"{section}.{key}" if section else key


def to_dict(obj: object) -> Any:
    """A plain nested dict/list version of a config (for YAML and JSON)."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, Mapping):
        return {k: to_dict(v) for k, v in obj.items()}
    return obj


def apply_overrides(data: Mapping[str, object], overrides: Sequence[str]) -> dict[str, object]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML scalars/lists) to a nested dict."""
    out = yaml.safe_load(yaml.safe_dump(data)) or {}  # deep copy
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
        fix = "; the value is read as YAML: a number, true/false, text, or a list such as [1, 2]"
        shown = item if len(item) <= 80 else f"{item[:77]}..."
        value = parse_yaml(raw, f"override {shown!r}", fix) if raw.strip() else ""
        plain = _plain_mapping({parts[-1]: value}, f"override {shown!r}")
        node[parts[-1]] = plain[parts[-1]]  # replaces anyway
    return out


@dataclasses.dataclass(frozen=True)
class Replace:
    """A value tagged ``!replace`` in a recipe: it replaces the base's value instead of merging."""

    value: object


REPLACE_TAG = "!replace"


def merge_sections(
    base: Mapping[str, object], over: Mapping[str, object], where: str = ""
) -> dict[str, object]:
    """``base`` with ``over`` merged in, recursively for nested mappings; a ``Replace`` value
    replaces the base's whole.

    >>> merge_sections({"optim": {"lr": 1e-6, "weight_decay": 0.01}}, {"optim": {"lr": 5e-7}})
    {'optim': {'lr': 5e-07, 'weight_decay': 0.01}}
    >>> merge_sections({"method": {"name": "lat", "scoped": True}}, {"method": Replace({"name": "cave"})})
    {'method': {'name': 'cave'}}
    """
    out = dict(base)
    for key, value in over.items():
        here = f"{where}.{key}" if where else str(key)
        if isinstance(value, Replace):
            out[key] = value.value
        elif isinstance(value, Mapping) and isinstance(current := out.get(key), Mapping):
            out[key] = merge_sections(current, value, here)
        else:
            out[key] = value
    return out


BASE_KEY = "base"
MAX_CONFIG_BYTES = 1 << 20  # a recipe is a few KB
MAX_NESTING = 32  # levels of mappings and lists; a recipe has four or five


def _read_text(file: Path) -> str:
    """The text of config ``file``, read up to the size cap; unreadable, oversized or binary
    files are one-line ``ConfigError``s."""
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"config file {str(file)!r} cannot be read ({exc.strerror or exc})") from exc
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"config file {str(file)!r} is larger than {MAX_CONFIG_BYTES >> 20} MiB; "
            "a recipe is a YAML file of a few KB: check the path"
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {str(file)!r} is not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x}); "
            "pass a YAML recipe"
        ) from exc


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """One line saying what is wrong and where (PyYAML's own message spans several lines)."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem:
        mark = exc.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{exc.problem}{where}"
    return " ".join(str(exc).split())


def _nesting_within(value: object, limit: int) -> bool:
    """Whether ``value`` nests at most ``limit`` mappings/lists deep (walked without recursion;
    a node shared through YAML aliases is visited once per depth, a cycle counts as too deep)."""
    stack: list[tuple[object, int]] = [(value, 0)]
    seen: set[tuple[int, int]] = set()
    while stack:
        node, depth = stack.pop()
        if isinstance(node, Replace):
            stack.append((node.value, depth))
            continue
        if not isinstance(node, (Mapping, list)) or (id(node), depth) in seen:
            continue
        if depth >= limit:
            return False
        seen.add((id(node), depth))
        stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, Mapping) else node))
    return True


class _NoAliasLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases (``*name``): each alias repeats a whole node, so a
    few lines of nested aliases expand to billions of values (a "billion laughs" file) in
    whatever walks the result."""

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise _AliasFound(f"YAML alias *{event.anchor} at line {event.start_mark.line + 1}")
        return super().compose_node(parent, index)


class _AliasFound(Exception):
    pass


def _construct_replace(loader: yaml.SafeLoader, node: yaml.Node) -> Replace:
    """``!replace VALUE``: VALUE read as the untagged node would be, in a ``Replace`` marker."""
    plain = copy.copy(node)
    plain.tag = loader.resolve(type(node), node.value, (True, False))
    return Replace(loader.construct_object(plain, deep=True))


_NoAliasLoader.add_constructor(REPLACE_TAG, _construct_replace)


def _plain(value: object, where: str) -> object:
    """``value`` with its ``Replace`` markers taken off (a marked key with nothing to replace
    keeps its value); a marker that is not the value of a key is a ``ConfigError``."""
    if isinstance(value, Replace):
        raise ConfigError(
            f"{where}: {REPLACE_TAG} marks the value of a key (method: {REPLACE_TAG} {{...}}), "
            "not a list item: remove the tag"
        )
    if isinstance(value, list):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, Mapping):
        return _plain_mapping(value, where)
    return value


def _plain_mapping(value: Mapping[str, object], where: str) -> dict[str, object]:
    """``_plain`` of a mapping: a value marked ``Replace`` keeps its value."""
    return {k: _plain(v.value if isinstance(v, Replace) else v, f"{where}.{k}") for k, v in value.items()}


def _safe_load(text: str) -> object:
    """``yaml.safe_load`` with ``_NoAliasLoader``."""
    loader = _NoAliasLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def parse_yaml(text: str, what: str, fix: str = "") -> object:
    """``text`` parsed as YAML; malformed or too deeply nested text, or text with an alias, is a
    one-line ``ConfigError`` naming ``what`` (a config file, an override) and ending with ``fix``.

    >>> parse_yaml("optim: {lr: 1.0e-6}", "recipe.yaml")
    {'optim': {'lr': 1e-06}}
    """
    too_deep = f"{what} nests lists or mappings more than {MAX_NESTING} levels deep; flatten it{fix}"
    try:
        value = _safe_load(text)
    except _AliasFound as exc:
        raise ConfigError(
            f"{what} uses a {exc}; evidra reads no YAML aliases: write the value out{fix}"
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{what} is not valid YAML: {_yaml_problem(exc)}{fix}") from exc
    except RecursionError:
        raise ConfigError(too_deep) from None
    if not _nesting_within(value, MAX_NESTING):
        raise ConfigError(too_deep)
    return value


def read_config_file(path: str | Path, seen: tuple[Path, ...] = ()) -> dict[str, object]:
    """The mapping of YAML file ``path``, merged over the file its ``base:`` names (recursively)."""
    file = Path(path)
    if not file.is_file():
        where = f" (base of {seen[-1]})" if seen else ""
        state = "is a directory, not a YAML file" if file.is_dir() else "does not exist"
        raise ConfigError(f"config file {str(file)!r}{where} {state}")
    if file.resolve() in seen:
        raise ConfigError(
            f"config file {str(file)!r} names itself as a base (through {seen[-1]}); break the cycle"
        )
    data = parse_yaml(_read_text(file), f"config file {str(file)!r}") or {}
    if not isinstance(data, dict):
        tagged = f" ({REPLACE_TAG} marks a section, not the whole file)" if isinstance(data, Replace) else ""
        raise ConfigError(f"config file {str(file)!r} must hold a mapping at the top level{tagged}")
    base = data.pop(BASE_KEY, None)
    if base is None:
        return _plain_mapping(data, str(file))
    if not isinstance(base, str) or not base.strip():
        raise ConfigError(f"{BASE_KEY}: in {str(file)!r} must name a config file, got {base!r}")
    merged = merge_sections(read_config_file(file.parent / base, (*seen, file.resolve())), data)
    return _plain_mapping(merged, str(file))


def load_config(cls: type[T], path: str | Path | None = None, overrides: Sequence[str] = ()) -> T:
    """Read ``path`` (YAML) if given, apply dotted ``overrides``, and build ``cls``.

    A class naming ``__stage_sections__`` (e.g. the SFT stage's ``("sft",)``) has each such
    section of the file merged over the rest: one recipe file serves several stages. Overrides
    of a stage section (``sft.run.output_dir=...``) apply to the section before the merge, the
    others (``run.output_dir=...``) after it, so both reach the stage and the plain ones win.
    """
    stages: tuple[str, ...] = getattr(cls, "__stage_sections__", ())
    staged = [o for o in overrides if o.partition("=")[0].strip().split(".")[0] in stages]
    data = apply_overrides(read_config_file(path) if path is not None else {}, staged)
    for section in stages:
        stage = data.get(section) or {}
        if not isinstance(stage, Mapping):
            raise ConfigError(f"config section {section!r} must be a mapping of overrides, got {stage!r}")
        data = merge_sections(data, stage)
    return from_dict(cls, apply_overrides(data, [o for o in overrides if o not in staged]))


def dump_config(cfg: object, path: str | Path) -> Path:
    """Write the resolved config as YAML."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    return out
