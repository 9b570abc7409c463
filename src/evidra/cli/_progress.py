"""Progress bars belong to the CLI; the library only calls ``progress(n)``.

Every bar opens through ``open_bar`` so that ``evidra -q`` hides them all: ``main`` calls
``show_bars`` once per command, before the subcommand runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_shown = {"bars": True}  # set by show_bars for the command being run


def show_bars(shown: bool) -> None:
    """Whether bars opened from now on are drawn (``-q`` passes False)."""
    _shown["bars"] = shown


def bars_shown() -> bool:
    """Whether bars opened now are drawn."""
    return _shown["bars"]


def open_bar(**tqdm_kwargs: Any) -> Any:
    """A tqdm bar on stderr, disabled under ``-q``."""
    from tqdm import tqdm

    return tqdm(**{"disable": not _shown["bars"], **tqdm_kwargs})


def advance(bar: Any) -> Callable[[int], None]:
    """A ``progress(n)`` callback that moves a tqdm bar by ``n``."""

    def step(n: int) -> None:
        bar.update(n)

    return step


class LazyBar:
    """A ``progress(n)`` callback whose tqdm bar opens at the first step.

    Errors raised before any progress (a model that fails to load) then print alone, in one line.
    """

    def __init__(self, **tqdm_kwargs: Any) -> None:
        self._kwargs = tqdm_kwargs
        self._bar: Any = None

    def _open(self, **late: Any) -> Any:
        if self._bar is None:
            self._bar = open_bar(**{**self._kwargs, **late})
        return self._bar

    def __call__(self, n: int) -> None:
        self._open().update(n)

    def move_to(self, done: int, total: int, **postfix: object) -> None:
        """Show ``done`` of ``total`` (which the caller may learn only once work starts)."""
        bar = self._open(total=total)
        bar.total = total
        bar.n = done
        bar.set_postfix(postfix, refresh=False)
        bar.refresh()

    def __enter__(self) -> LazyBar:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.close()
