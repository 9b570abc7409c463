"""A generic name -> object registry, used for every pluggable component.

Components are chosen by registry name in configs, never by import path, so a typo gives
a "did you mean" error instead of an ImportError deep inside a run.

>>> ACTIVATIONS: Registry[int] = Registry("activation")
>>> @ACTIVATIONS.register("one")
... def one() -> int:
...     return 1
>>> ACTIVATIONS.get("one")()
1
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from typing import Generic, TypeVar

from evidra.core.errors import RegistryError

T = TypeVar("T")
logger = logging.getLogger(__name__)

# the entry-point group under which installed packages (evidra itself included) name the modules that
# register methods; importing one registers its paradigm, reward and judge prompt as well
METHOD_PLUGINS = "evidra.methods"


class Registry(Generic[T]):
    """Maps names to objects of one kind (functions, classes, factories).

    With ``plugins`` (an entry-point group), the first lookup of a name not registered yet imports
    every module named under that group, once, so a method's own parts (its paradigm, its reward)
    are found by name without importing the method first; a module that fails to import is
    skipped with one warning line. Loading is re-entrant: a module that looks up a name while it
    is being imported (a method naming another method's judge prompt) goes on loading the modules
    not imported yet, so the order of the entry points does not matter.
    """

    def __init__(self, kind: str, *, plugins: str | None = None) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}
        self._plugins = plugins
        self._pending: list[EntryPoint] = []

    def _load_plugins(self) -> None:
        group, self._plugins = self._plugins, None  # listed once; each module imported once
        if group is not None:
            self._pending = list(entry_points(group=group))
        while self._pending:
            point = self._pending.pop(0)  # taken before importing: a nested lookup loads the rest
            try:
                point.load()
            except Exception as exc:  # another package's module: one line, the rest still load
                logger.warning("%s: plugin %s (%s) did not load: %s", self.kind, point.name, point.value, exc)

    def register(self, name: str, *, overwrite: bool = False) -> Callable[[T], T]:
        """Decorator that registers its target under ``name``."""

        def decorator(obj: T) -> T:
            self.add(name, obj, overwrite=overwrite)
            return obj

        return decorator

    def add(self, name: str, obj: T, *, overwrite: bool = False) -> None:
        if not name or not isinstance(name, str):
            raise RegistryError(f"{self.kind} name must be a non-empty string, got {name!r}")
        if name in self._items and not overwrite:
            raise RegistryError(
                f"{self.kind} {name!r} is already registered; pass overwrite=True to replace it"
            )
        self._items[name] = obj

    def get(self, name: str) -> T:
        if name not in self._items:
            self._load_plugins()
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._items), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            known = ", ".join(sorted(self._items)) or "(none registered)"
            raise RegistryError(f"unknown {self.kind} {name!r}{hint} Known: {known}") from None

    def names(self) -> list[str]:
        self._load_plugins()
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        if name not in self._items:
            self._load_plugins()
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
