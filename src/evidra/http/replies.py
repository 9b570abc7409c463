"""Reading the replies of servers evidra does not control: bounded in bytes, strict in JSON.

Every HTTP client of evidra (the OpenAI-compatible chat client behind the evaluated endpoint,
the judge and the teachers; the search client; the vLLM server client; the index health probe)
reads a reply through here.

* **Bytes**: a body is read as it streams and refused as soon as it passes its cap
  (``MAX_REPLY_BYTES``, 16 MiB, unless the client is given another); a ``Content-Length`` over
  the cap is refused before any byte of the body is read. The cap counts decoded bytes: a body
  sent with ``Content-Encoding: gzip`` or ``deflate`` (the only ones asked for, ``REQUEST_HEADERS``)
  is inflated a network read at a time into at most cap + 1 bytes, so a 2 MB gzip that would
  expand to 2 GB costs the cap, not 2 GB. Other encodings (``br``, ``zstd``, several stacked) are
  refused unread. An error reply (4xx/5xx) is only shown, so its first ``ERROR_BODY_BYTES`` are
  kept and the rest is not read.
* **JSON**: ``loads`` refuses ``NaN`` and ``Infinity``, numbers that overflow to infinity
  (``1e999``), integers of more than 4,300 digits and nesting deeper than the decoder's recursion
  limit, each as a ``ReplyError`` (never ``RecursionError`` or ``OverflowError``). Each client then
  checks the shape it expects and raises its own error type.

``LoopThread`` runs coroutines on an event loop of its own thread, so that a blocking client
can bound a whole call by the wall clock (``asyncio.wait_for``) and share one connection pool
among threads.

>>> loads(b'{"a": [1, 2.5]}')
{'a': [1, 2.5]}
>>> loads(b'{"index": Infinity}')
Traceback (most recent call last):
evidra.http.replies.ReplyError: a body that is not JSON (non-finite number Infinity)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import threading
import zlib
from collections.abc import Coroutine
from typing import TYPE_CHECKING, NoReturn, TypeVar

from evidra.core.errors import EvidraError
from evidra.core.jsonvalue import JSON

if TYPE_CHECKING:
    import httpx

T = TypeVar("T")

MAX_REPLY_BYTES = 16 * 2**20
ERROR_BODY_BYTES = 64 * 2**10
REQUEST_HEADERS = {"Accept-Encoding": "gzip, deflate"}
_INFLATED = {"gzip", "x-gzip", "deflate"}


class ReplyError(EvidraError, ValueError):
    """A reply that cannot be accepted: over its byte cap, in an unknown encoding, or not JSON.
    The message completes "<url> answered with ...", on one line."""


class CappedBody:
    """A reply body collected chunk by chunk, decoded, refused past ``cap`` bytes; with
    ``truncate`` it is cut at the cap instead (an error body, only shown)."""

    def __init__(self, response: httpx.Response, cap: int, *, truncate: bool = False) -> None:
        self.cap, self.truncate, self.full = cap, truncate, False
        self._buf = bytearray()
        encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding not in _INFLATED | {"identity", ""}:
            raise ReplyError(
                f"a body in Content-Encoding {encoding[:40]!r}, which evidra does not decode "
                f"(it asks for gzip, deflate or none)"
            )
        self._inflate = zlib.decompressobj(47) if encoding in _INFLATED else None  # 47: zlib or gzip header
        declared = response.headers.get("Content-Length", "")
        if not truncate and declared.isdigit() and int(declared) > cap and self._inflate is None:
            raise ReplyError(f"a body of {int(declared)} bytes (its Content-Length), over the {cap}-byte cap")

    def feed(self, raw: bytes) -> None:
        """Add one network read; ``ReplyError`` once the decoded body passes the cap."""
        if self._inflate is None:
            self._add(raw)
            return
        data = raw
        while data and not self.full and not self._inflate.eof:
            try:
                out = self._inflate.decompress(data, self.cap - len(self._buf) + 1)
            except zlib.error as exc:
                raise ReplyError(f"a compressed body that does not decompress ({exc})") from None
            self._add(out)
            data = self._inflate.unconsumed_tail

    def _add(self, data: bytes) -> None:
        room = self.cap - len(self._buf)
        if len(data) > room:
            if not self.truncate:
                raise ReplyError(f"a body over the {self.cap}-byte cap (reading stopped there)")
            data, self.full = data[:room], True
        self._buf += data

    def finish(self) -> bytes:
        """The body; ``ReplyError`` when a compressed one stopped before its end (a whole reply only)."""
        if self._inflate is not None and not self._inflate.eof and not self.truncate:
            raise ReplyError("a compressed body that does not decompress (it ends before its end)")
        return bytes(self._buf)


def read_capped(response: httpx.Response, cap: int = MAX_REPLY_BYTES, *, truncate: bool = False) -> bytes:
    """The decoded body of a streamed ``response`` (``client.stream(...)``), at most ``cap`` bytes."""
    body = CappedBody(response, cap, truncate=truncate)
    for chunk in response.iter_raw():
        body.feed(chunk)
        if body.full:
            break
    return body.finish()


async def aread_capped(
    response: httpx.Response, cap: int = MAX_REPLY_BYTES, *, truncate: bool = False
) -> bytes:
    """``read_capped`` for an async streamed ``response``."""
    body = CappedBody(response, cap, truncate=truncate)
    async for chunk in response.aiter_raw():
        body.feed(chunk)
        if body.full:
            break
    return body.finish()


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"non-finite number {name}")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:24]} overflows to infinity")
    return value


def loads(data: bytes | str) -> JSON:
    """Decoded JSON of a reply, finite numbers only; ``ReplyError`` for anything else."""
    try:
        value: JSON = json.loads(data, parse_constant=_no_constant, parse_float=_finite_float)
    except RecursionError:
        raise ReplyError("JSON nested too deeply to decode") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, the hooks above, int() digit limit
        raise ReplyError(f"a body that is not JSON ({' '.join(str(exc).split())[:120]})") from None
    return value


def shown(data: bytes, limit: int = 200) -> str:
    """A body as one line of text for an error message, cut to ``limit`` characters."""
    line = " ".join(data.decode("utf-8", "replace").split()) or "(empty body)"
    return line if len(line) <= limit else line[: limit - 1] + "…"


class LoopThread:
    """An event loop running in a daemon thread; ``run`` blocks until a coroutine on it ends.

    A loop belongs to the process that started it: ``alive`` is False in a forked child, whose
    owner then starts another.
    """

    def __init__(self, name: str) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self.thread.start()

    @property
    def alive(self) -> bool:
        return self.pid == os.getpid() and self.thread.is_alive()

    # a coroutine as asyncio drives it: what it yields is the loop's business, it is sent None
    def run(self, coro: Coroutine[object, None, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def close(self, last: Coroutine[object, None, object] | None = None) -> None:
        """Run ``last`` (closing a connection pool, say) for at most 5 s, then stop the loop."""
        if self.thread.is_alive() and self.pid == os.getpid():
            if last is not None:
                with contextlib.suppress(Exception):  # closing must not fail: the pool goes either way
                    asyncio.run_coroutine_threadsafe(last, self.loop).result(timeout=5)
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
        elif last is not None:
            last.close()  # never awaited: the loop is gone
        if not self.loop.is_running():
            self.loop.close()
