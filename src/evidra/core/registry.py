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
from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

from evidra.core.errors import RegistryError

T = TypeVar("T")


class Registry(Generic[T]):
    """Maps names to objects of one kind (functions, classes, factories)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._items: dict[str, T] = {}

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
        try:
            return self._items[name]
        except KeyError:
            close = difflib.get_close_matches(name, list(self._items), n=3)
            hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
            known = ", ".join(sorted(self._items)) or "(none registered)"
            raise RegistryError(f"unknown {self.kind} {name!r}{hint} Known: {known}") from None

    def names(self) -> list[str]:
        return sorted(self._items)

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {self.names()})"
