"""Linear-time tag scanning: what ``re.finditer(open + "(.*?)" + close, re.DOTALL)`` finds,
without its backtracking.

A lazy ``(.*?)`` between an opening and a closing pattern makes Python's ``re`` rescan the rest
of the text from every opening that is never closed: quadratic time on a model that repeats an
unclosed tag, and worse when several lazy groups follow each other. Model output is hostile
input, so the parsers of ``evidra.paradigms``, ``evidra.rewards`` and ``evidra.env`` find their
blocks here instead: the closing positions are listed once, and each opening takes the first
closing after it by binary search (O(n log n) in all).

The results are those of the regular expression, match for match (tests compare both on
random tag soup). The opening pattern must match at most one way at a given position (a
literal, or a pattern whose quantifiers cannot give back characters, such as
``Bounding box:\\s*\\{``); the closing text is a literal.

Numbers written by a model are read with :func:`parse_digits`, which refuses digit runs too long
to be a page, image or entry number instead of letting ``int`` raise (Python refuses to convert
more than 4,300 digits) or build a huge value.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache

MAX_INT_DIGITS = 18  # longer digit runs are malformed numbers, never page, image or entry numbers


@dataclass(frozen=True)
class Block:
    """One ``open body close`` match: ``head`` is the opening match (its groups are the
    opening's groups), the body is ``text[body_start:body_end]``, the match ends at ``end``."""

    head: re.Match[str]
    body_start: int
    body_end: int
    end: int

    @property
    def start(self) -> int:
        return self.head.start()

    def body(self) -> str:
        return self.head.string[self.body_start : self.body_end]

    def group(self) -> str:
        return self.head.string[self.start : self.end]


@lru_cache(maxsize=256)
def literal(text: str, ignore_case: bool = False) -> re.Pattern[str]:
    """A compiled pattern matching exactly ``text`` (case-insensitive as ``re.IGNORECASE`` is)."""
    return re.compile(re.escape(text), re.IGNORECASE if ignore_case else 0)


@lru_cache(maxsize=256)
def _lookahead(close: str, ignore_case: bool) -> re.Pattern[str]:
    return re.compile(f"(?={re.escape(close)})", re.IGNORECASE if ignore_case else 0)


def starts_of(text: str, close: str, *, ignore_case: bool = False) -> list[int]:
    """Every position where ``close`` occurs (overlapping occurrences included), ascending."""
    return [m.start() for m in _lookahead(close, ignore_case).finditer(text)]


@dataclass(frozen=True)
class BlockScanner:
    """The closing positions of one text, listed once; :meth:`next_block` finds the first
    ``open_(.*?)close`` match from any position by binary search."""

    text: str
    close: str
    ignore_case: bool = False
    dotall: bool = True
    closes: list[int] = field(init=False, repr=False)
    newlines: list[int] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "closes", starts_of(self.text, self.close, ignore_case=self.ignore_case))
        object.__setattr__(self, "newlines", [] if self.dotall else starts_of(self.text, "\n"))

    def next_block(self, open_: str | re.Pattern[str], pos: int = 0) -> Block | None:
        """The first match of ``open_ + "(.*?)" + re.escape(close)`` at or after ``pos``."""
        opener = literal(open_, self.ignore_case) if isinstance(open_, str) else open_
        if not self.closes:
            return None
        while (head := opener.search(self.text, pos)) is not None:
            i = bisect_left(self.closes, head.end())
            if i < len(self.closes):
                end = self.closes[i]
                j = bisect_left(self.newlines, head.end())
                if self.dotall or j == len(self.newlines) or self.newlines[j] > end:
                    return Block(head, head.end(), end, end + len(self.close))
            pos = head.start() + 1
        return None


def find_blocks(
    text: str,
    open_: str | re.Pattern[str],
    close: str,
    *,
    ignore_case: bool = False,
    dotall: bool = True,
) -> Iterator[Block]:
    """The matches of ``open_ + "(.*?)" + re.escape(close)`` in ``text``, in order.

    ``open_`` is a literal or a compiled pattern (its own flags apply); ``ignore_case`` applies to
    a literal ``open_`` and to ``close``; ``dotall=False`` keeps newlines out of the body, as the
    pattern without ``re.DOTALL`` does.

    >>> [b.body() for b in find_blocks("<a>x</a><a>y<a>z</a><a>", "<a>", "</a>")]
    ['x', 'y<a>z']
    """
    scanner = BlockScanner(text, close, ignore_case, dotall)
    pos = 0
    while (block := scanner.next_block(open_, pos)) is not None:
        yield block
        pos = block.end


def first_block(text: str, open_: str, close: str, *, ignore_case: bool = False) -> str | None:
    """Body of the first ``open_(.*?)close`` match (DOTALL), or None.

    >>> first_block("<b>1<a>2</a>3</a>", "<a>", "</a>")
    '2'
    """
    return next((b.body() for b in find_blocks(text, open_, close, ignore_case=ignore_case)), None)


@lru_cache(maxsize=64)
def _named_opener(names: tuple[str, ...]) -> re.Pattern[str]:
    return re.compile("<(" + "|".join(re.escape(n) for n in names) + ")>")


def find_named_blocks(text: str, names: Sequence[str]) -> Iterator[Block]:
    """The matches of ``<(name1|name2|..)>(.*?)</\\1>`` (DOTALL): each opening takes the first
    closing of its own name. ``head.group(1)`` is the name.

    >>> [(b.head.group(1), b.body()) for b in find_named_blocks("<a>1<b>2</a></b>", ("a", "b"))]
    [('a', '1<b>2')]
    """
    opener = _named_opener(tuple(names))
    closes = {name: starts_of(text, f"</{name}>") for name in names}
    pos = 0
    while (head := opener.search(text, pos)) is not None:
        name = head.group(1)
        starts = closes[name]
        i = bisect_left(starts, head.end())
        if i == len(starts):
            pos = head.start() + 1
            continue
        end = starts[i] + len(name) + 3
        yield Block(head, head.end(), starts[i], end)
        pos = end


def parse_digits(digits: str, max_digits: int = MAX_INT_DIGITS) -> int | None:
    """``int(digits)`` for a run of at most ``max_digits`` decimal digits (any script, as
    ``\\d`` and ``int`` accept them, optionally signed), else None: a malformed number.

    >>> parse_digits("12"), parse_digits("\\u0661\\u0662"), parse_digits("9" * 5000), parse_digits("x")
    (12, 12, None, None)
    """
    body = digits[1:] if digits[:1] in ("+", "-") else digits
    if not body or len(body) > max_digits or not body.isdecimal():
        return None
    return int(digits)


def finite_float(value: object) -> float | None:
    """``float(value)`` when it is a finite number, else None (never raises: a JSON integer of
    hundreds of digits, NaN, an infinity or a non-number is no coordinate).

    >>> finite_float(3), finite_float(10**400), finite_float(float("nan")), finite_float("x")
    (3.0, None, None, None)
    """
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None
