"""What a person knows about a page besides its pixels: document, file, page number, title, and
the metadata given at ingest; and the ``--where`` filters over them.

A document is one ingested file content; its id is the content hash that starts every page id
(``<doc id>-p0003``). Its title is the PDF's own ``/Title`` when it has one, else the file name
without its suffix. User metadata is ``key=value`` text given at ingest (``--meta``, the same
for every file of the call) or read from a sidecar ``<file>.meta.json`` next to a file (a JSON
object of short scalar values; it wins over ``--meta``).

A filter (``Where``) holds ``key=value`` conditions: conditions on one key are alternatives,
conditions on different keys must all hold. Keys: ``file`` (the file name, or its source path
relative to the ingest root), ``doc`` (the document id), ``page`` (the 1-based page number),
``title``, and any user metadata key.

>>> where = parse_where(["file=report.pdf", "file=memo.pdf", "year=2024"])
>>> page = PageMeta("ab-p0003", "ab", "2024/report.pdf", 3, "Report", {"year": "2024"})
>>> where.matches(page), parse_where(["page=2"]).matches(page)
(True, False)
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from evidra.core.errors import InvalidInputError

SIDECAR_SUFFIX = ".meta.json"
MAX_SIDECAR_BYTES = 64 * 1024
MAX_KEY, MAX_VALUE = 64, 1024
BUILTIN_KEYS = ("file", "doc", "page", "title")


@dataclass(frozen=True)
class PageMeta:
    """One page as a person cites and filters it."""

    page_id: str
    doc_id: str
    source: str  # the file's path relative to its ingest root
    page_number: int
    title: str = ""
    meta: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "meta", MappingProxyType(dict(self.meta)))

    @property
    def file(self) -> str:
        return self.source.replace("\\", "/").rsplit("/", 1)[-1]

    @property
    def citation(self) -> str:
        return f"{self.file} p. {self.page_number}" if self.source else self.page_id

    def fields(self) -> dict[str, str]:
        """Every filterable value: the built-in keys, then the user's."""
        return {**self.meta, "doc": self.doc_id, "page": str(self.page_number), "title": self.title}

    def record(self) -> dict[str, object]:
        """As JSON: what a hit carries besides its score."""
        return {
            "doc_id": self.doc_id,
            "file": self.file,
            "source": self.source,
            "page_number": self.page_number,
            "title": self.title,
            "meta": dict(self.meta),
            "cite": self.citation,
        }


@dataclass(frozen=True)
class Where:
    """``key -> accepted values``: a page matches when every key has one of its values."""

    conditions: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.conditions)

    def matches(self, page: PageMeta) -> bool:
        values = page.fields()
        for key, accepted in self.conditions.items():
            if key == "file":
                if not ({page.file, page.source} & accepted):
                    return False
            elif values.get(key) not in accepted:
                return False
        return True

    def __str__(self) -> str:
        return " ".join(f"{k}={v}" for k, vs in self.conditions.items() for v in sorted(vs))


def parse_where(items: Sequence[str] | Mapping[str, str | Sequence[str]] | None) -> Where:
    """``["key=value", ...]`` (or a mapping of key to one value or several) as a ``Where``."""
    if not items:
        return Where()
    pairs: list[tuple[str, str]] = []
    if isinstance(items, Mapping):
        for key, value in items.items():
            pairs += [(key, value)] if isinstance(value, str) else [(key, v) for v in value]
    else:
        for item in items:
            key, sep, value = str(item).partition("=")
            if not sep or not key.strip():
                raise InvalidInputError(
                    f"filter {item!r} is not KEY=VALUE; e.g. file=report.pdf, page=3, or a --meta key"
                )
            pairs.append((key, value))
    conditions: dict[str, set[str]] = {}
    for key, value in pairs:
        conditions.setdefault(key.strip(), set()).add(str(value).strip())
    return Where({k: frozenset(v) for k, v in conditions.items()})


def parse_meta(items: Sequence[str]) -> dict[str, str]:
    """``["key=value", ...]`` of ``--meta`` as a mapping (a later key wins)."""
    meta = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise InvalidInputError(f"--meta takes KEY=VALUE, got {item!r}; e.g. --meta year=2024")
        meta[key.strip()] = value.strip()
    return check_meta(meta, "--meta")


def check_meta(meta: Mapping[str, object], where: str) -> dict[str, str]:
    """Short scalar values under non-empty keys that are not built-in ones, as text."""
    out = {}
    for key, value in meta.items():
        if not isinstance(key, str) or not key or len(key) > MAX_KEY or key in BUILTIN_KEYS:
            raise InvalidInputError(
                f"{where}: metadata key {str(key)[:MAX_KEY]!r} must be 1-{MAX_KEY} characters and not one "
                f"of {', '.join(BUILTIN_KEYS)} (those come from the file itself)"
            )
        if isinstance(value, dict | list) or value is None or len(str(value)) > MAX_VALUE:
            raise InvalidInputError(
                f"{where}: metadata {key!r} must be a text, number or boolean of at most {MAX_VALUE} "
                "characters"
            )
        out[key] = str(value).lower() if isinstance(value, bool) else str(value)
    return out


def read_sidecar(document: Path) -> dict[str, str]:
    """The metadata of ``<document>.meta.json`` next to ``document`` ({} when there is none)."""
    path = document.with_name(document.name + SIDECAR_SUFFIX)
    if not path.is_file():
        return {}
    if path.stat().st_size > MAX_SIDECAR_BYTES:
        raise InvalidInputError(f"{path.name} is over {MAX_SIDECAR_BYTES // 1024} KiB; keep metadata short")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidInputError(f"{path.name} is not JSON ({exc}); write one object of key: value") from None
    if not isinstance(data, dict):
        raise InvalidInputError(f"{path.name} must hold one JSON object of key: value")
    return check_meta(data, path.name)
