"""Progress bars belong to the CLI; the library only calls ``progress(n)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def advance(bar: Any) -> Callable[[int], None]:
    """A ``progress(n)`` callback that moves a tqdm bar by ``n``."""

    def step(n: int) -> None:
        bar.update(n)

    return step
