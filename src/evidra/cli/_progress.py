"""Progress bars belong to the CLI; the library only calls ``progress(n)``.

Every bar opens through ``open_bar`` so that ``evidra -q`` hides them all: ``main`` calls
``show_bars`` once per command, before the subcommand runs. On a terminal a bar is tqdm's,
redrawn in place. When stderr is a file or a pipe (a log, a CI job, ``2> run.log``) a redraw
would add one ``\\r``-joined line per update, so the bar writes plain lines instead
(``PlainLines``): one each time another tenth of the work is done or ``PLAIN_EVERY_S`` seconds
have passed, and a last one when it closes::

    ingest: 120/500 files (24%), 3.1 files/s, ETA 2m03s
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

if TYPE_CHECKING:
    from tqdm import tqdm

PLAIN_EVERY_S = 30.0  # without a terminal: at least one line this often while work goes on
_shown = {"bars": True}  # set by show_bars for the command being run


def show_bars(shown: bool) -> None:
    """Whether bars opened from now on are drawn (``-q`` passes False)."""
    _shown["bars"] = shown


def bars_shown() -> bool:
    """Whether bars opened now are drawn."""
    return _shown["bars"]


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is an open terminal (False for files, pipes, closed or odd streams)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def open_bar(**tqdm_kwargs: Any) -> tqdm[NoReturn] | PlainLines:
    """A bar on stderr: tqdm's on a terminal, ``PlainLines`` otherwise; disabled under ``-q``."""
    from tqdm import tqdm

    if not _shown["bars"] or is_terminal(sys.stderr):
        return tqdm(**{"disable": not _shown["bars"], **tqdm_kwargs})
    keys = ("desc", "total", "unit", "initial")
    return PlainLines(**{k: tqdm_kwargs[k] for k in keys if tqdm_kwargs.get(k) is not None})


def advance(bar: tqdm[NoReturn] | PlainLines) -> Callable[[int], None]:
    """A ``progress(n)`` callback that moves a bar by ``n``."""

    def step(n: int) -> None:
        bar.update(n)

    return step


def plural(unit: str) -> str:
    """``unit`` counted: ``page`` -> ``pages``, ``query`` -> ``queries``; short symbols stay.

    >>> plural("page"), plural("query"), plural("q")
    ('pages', 'queries', 'q')
    """
    if len(unit) <= 2 or unit.endswith("s"):
        return unit
    if unit.endswith("y") and unit[-2:-1] not in tuple("aeiou"):
        return unit[:-1] + "ies"
    return unit + "s"


def duration(seconds: float) -> str:
    """A short human duration.

    >>> duration(4.2), duration(123), duration(3725)
    ('4s', '2m03s', '1h02m')
    """
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


class PlainLines:
    """A progress bar for a stream that is not a terminal: whole lines, written now and then.

    It has the part of tqdm's interface the CLI uses (``update``, ``n``, ``total``,
    ``set_postfix``, ``refresh``, ``close``, a context manager). A line is written when another
    tenth of ``total`` is done or ``every_s`` seconds passed since the last one; ``close`` writes
    the final count unless the last line already showed it, so a run of any length writes at
    most 11 lines plus one per ``every_s`` seconds.
    """

    def __init__(
        self,
        desc: str = "",
        total: int | None = None,
        unit: str = "it",
        initial: int = 0,
        *,
        file: TextIO | None = None,
        every_s: float = PLAIN_EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.desc, self.total, self.unit, self.n = desc, total, unit, initial
        self._start_n, self._file, self._every_s, self._clock = initial, file or sys.stderr, every_s, clock
        self._start = self._last_time = clock()
        self._last_n, self._last_tenth = initial, self._tenth()
        self._postfix = ""

    def _tenth(self) -> int:
        return self.n * 10 // self.total if self.total else 0

    def update(self, n: int = 1) -> None:
        self.n += n
        self.refresh()

    def set_postfix(
        self, ordered_dict: Mapping[str, object] | None = None, refresh: bool = True, **kwargs: object
    ) -> None:
        items = {**(ordered_dict or {}), **kwargs}
        self._postfix = "".join(f", {k}={v}" for k, v in items.items())
        if refresh:
            self.refresh()

    def refresh(self) -> None:
        """Write a line if another tenth is done or ``every_s`` passed since the last line."""
        now = self.n != self._last_n and (
            self._tenth() > self._last_tenth or self._clock() - self._last_time >= self._every_s
        )
        if now:
            self._write(done=self.total is not None and self.n >= self.total)

    def close(self) -> None:
        if self.n != self._last_n:
            self._write(done=True)

    def _write(self, *, done: bool) -> None:
        self._last_n, self._last_tenth, self._last_time = self.n, self._tenth(), self._clock()
        self._file.write(self.line(done=done) + "\n")
        self._file.flush()

    def line(self, *, done: bool = False) -> str:
        """The line for the current count: ``desc: n/total units (p%), rate, ETA`` (or the time
        taken once ``done``), then the postfix."""
        units = plural(self.unit)
        count = f"{self.n} {units}"
        if self.total:
            count = f"{self.n}/{self.total} {units} ({100 * self.n // self.total}%)"
        parts = [f"{self.desc}: {count}" if self.desc else count]
        elapsed, moved = self._last_time - self._start, self.n - self._start_n
        if moved > 0 and elapsed > 0:
            rate = moved / elapsed
            if rate >= 1:
                parts.append(f"{rate:.0f} {units}/s" if rate >= 100 else f"{rate:.3g} {units}/s")
            else:
                parts.append(f"{1 / rate:.3g} s/{self.unit}")
            if done:
                parts.append(f"in {duration(elapsed)}")
            elif self.total:
                parts.append(f"ETA {duration((self.total - self.n) / rate)}")
        return ", ".join(parts) + self._postfix

    def __enter__(self) -> PlainLines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LazyBar:
    """A ``progress(n)`` callback whose bar opens at the first step.

    Errors raised before any progress (a model that fails to load) then print alone, in one line.
    """

    def __init__(self, **tqdm_kwargs: Any) -> None:
        self._kwargs = tqdm_kwargs
        self._bar: tqdm[NoReturn] | PlainLines | None = None

    def _open(self, **late: Any) -> tqdm[NoReturn] | PlainLines:
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
