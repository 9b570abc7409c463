"""Parse and render documents in worker processes, each under a memory cap and a deadline.

PDFium is C code that evidra cannot bound from inside: one 632-byte PDF whose Form XObject draws
itself twice grows it past 4 GB and ends in ``abort()``, taking the whole process with it. So
documents are parsed in workers (``render_worker``): fresh interpreters (never a fork of a
threaded parent such as the web app; started like multiprocessing's "spawn", without re-running
the caller's main script), each capping its own address space at ``Limits.max_worker_bytes``.
A worker streams a file's pages back one at a time, so the parent holds one page. When a worker
runs out of memory (PDFium aborts, or Python raises ``MemoryError``), takes longer than
``Limits.page_timeout_s`` to open the file or render a page, or crashes, it is killed; the file
is refused in one line naming it and the reason (too much memory, too slow, unreadable) and the
next file gets a fresh worker. Workers are reused across files and, through ``shared_pool``,
across ``ingest`` calls; they stop at exit and exit by themselves when their parent is gone.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Generator
from dataclasses import dataclass
from typing import Literal

from evidra.core.errors import CorpusError, EvidraError
from evidra.core.jsonvalue import JSON, JSONObject, json_kind
from evidra.core.types import Box, Word
from evidra.corpus.limits import DEFAULT_MAX_WORKER_BYTES, Limits
from evidra.corpus.pdf import RenderedPage
from evidra.corpus.render_worker import (
    EXIT_OUT_OF_MEMORY,
    FRAME_HEAD,
    MAX_REPLY_HEADER_BYTES,
    Job,
    encode,
    send_frame,
)
from evidra.corpus.renderer import Cancelled, DocKind

logger = logging.getLogger(__name__)

POLL_S = 0.1  # how often a wait for a worker looks at the cancel event
JOIN_S = 5.0  # how long a dead or killed worker may take to be reaped
STOP_S = 2.0  # how long an idle worker may take to quit when asked
START_S = 60.0  # how long a new worker may take to start its interpreter (a loaded machine)
MAX_REASON_CHARS = 2000
_BOOT = (
    "import json, sys; sys.path[:] = json.loads(sys.argv[1]); "
    "from evidra.corpus.render_worker import main; main(sys.argv[2:])"
)


class _TooSlow(Exception):
    pass


class _Died(Exception):
    pass


class _Malformed(Exception):
    pass


class _Worker:
    """One worker process and the parent's end of its socket."""

    def __init__(self, memory_bytes: int) -> None:
        ours, theirs = socket.socketpair()
        # a fresh interpreter (never a fork of this process and its threads), started the way
        # multiprocessing's "spawn" does but without re-running the caller's main script in it
        fd = theirs.fileno()
        command = [sys.executable, "-I", "-c", _BOOT, json.dumps(sys.path), str(fd), str(memory_bytes)]
        command.append(str(os.getpid()))
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, pass_fds=(fd,)
            )
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        self.sock = ours
        self.memory_bytes = memory_bytes
        self.killed = False  # by us: its death says nothing about the file
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Wait for the worker's first reply, so no job's deadline pays for its start."""
        try:
            ready, _ = _decode(self.receive(MAX_REPLY_HEADER_BYTES, time.monotonic() + START_S, None))
        except (_TooSlow, _Died, _Malformed) as exc:
            self.kill()
            raise OSError(f"a render worker did not start ({type(exc).__name__.strip('_')})") from None
        if ready["t"] != "ready":
            self.kill()
            raise OSError(f"a render worker did not start (it said {ready['t']!r})")

    @property
    def pid(self) -> int:
        return self.process.pid

    def send(self, job: Job, timeout: float) -> None:
        self.sock.settimeout(timeout)
        send_frame(self.sock, encode(job.header()))
        send_frame(self.sock, job.data)

    def receive(self, max_bytes: int, deadline: float, cancel: threading.Event | None) -> bytearray:
        """The next frame's payload; raises ``_TooSlow`` past ``deadline``, ``_Died`` on EOF."""
        (size,) = FRAME_HEAD.unpack(self._exactly(FRAME_HEAD.size, deadline, cancel))
        if size > max_bytes:
            raise _Malformed(f"a reply of {size} bytes where at most {max_bytes} fit")
        return self._exactly(size, deadline, cancel)

    def _exactly(self, size: int, deadline: float, cancel: threading.Event | None) -> bytearray:
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            if cancel is not None and cancel.is_set():
                raise Cancelled("cancelled")
            left = deadline - time.monotonic()
            if left <= 0:
                raise _TooSlow
            self.sock.settimeout(min(left, POLL_S))
            try:
                n = self.sock.recv_into(view[got:])
            except TimeoutError:
                continue
            except OSError as exc:
                raise _Died from exc
            if n == 0:
                raise _Died
            got += n
        return buf

    def exit_code(self) -> int | None:
        """The worker's exit code once it ended (``-N`` for signal N); kills it if it lingers."""
        try:
            return self.process.wait(JOIN_S)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def alive(self) -> bool:
        return not self.killed and self.process.poll() is None

    def kill(self) -> None:
        self.killed = True
        if self.process.poll() is None:
            self.process.kill()
        try:
            self.process.wait(JOIN_S)
        except subprocess.TimeoutExpired:  # not reaped yet (a process in uninterruptible sleep)
            logger.warning("render worker %d did not end within %g s of SIGKILL", self.process.pid, JOIN_S)
        self.sock.close()

    def stop(self) -> None:
        """Ask an idle worker to quit; kill it if it does not."""
        try:
            self.sock.settimeout(STOP_S)
            send_frame(self.sock, encode({"op": "quit"}))
            self.process.wait(STOP_S)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self.kill()


def _stop_all(idle: list[_Worker], busy: set[_Worker]) -> None:
    for worker in [*idle, *busy]:
        worker.kill() if worker in busy else worker.stop()
    idle.clear()
    busy.clear()


_RENDERERS = {"pdf": "PDF renderer (PDFium)", "image": "image decoder (Pillow)"}


def too_slow(name: str, seconds: float, where: str) -> str:
    return (
        f"{name}: too slow (over {seconds:g} s {where}); if the file is trusted, raise the deadline "
        f"(--page-timeout {2 * seconds:g}, or Limits(page_timeout_s=...))"
    )


def too_much_memory(name: str, cap_mib: int, where: str, *, by_system: bool = False) -> str:
    cause = f"over the {cap_mib} MiB worker cap"
    if by_system:
        cause = "killed by the system's out-of-memory killer"
    return (
        f"{name}: too much memory ({cause} {where}); if the file is trusted, raise the cap "
        f"(--max-worker-mb {2 * cap_mib}, or Limits(max_worker_bytes=...)) or lower --dpi"
    )


def crashed(name: str, renderer: str, how: str, where: str) -> str:
    return f"{name}: unreadable (the {renderer} crashed with {how} {where}); the file is damaged or hostile"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


@dataclass(frozen=True)
class _Reply:
    kind: str  # open, page, done, title
    page: RenderedPage | None = None
    title: str = ""


_REPLIES = frozenset({"ready", "open", "page", "done", "title", "error"})


def _decode(frame: bytearray) -> tuple[JSONObject, list[str]]:
    """A reply header, and the warnings it carries (``log``: none when absent)."""
    try:
        message: JSON = json.loads(frame)
    except ValueError as exc:
        raise _Malformed(f"not JSON ({exc})") from None
    if not isinstance(message, dict) or message.get("t") not in _REPLIES:
        raise _Malformed("not a reply")
    log = message.get("log", [])
    lines = [line for line in log if isinstance(line, str)] if isinstance(log, list) else []
    if not isinstance(log, list) or len(lines) != len(log):
        raise _Malformed("a log that is not a list of lines")
    return message, lines


def _size(message: JSONObject, max_pixels: int) -> tuple[int, int]:
    """The width and height of a page reply, checked against ``max_pixels``."""
    width, height = message.get("w"), message.get("h")
    if type(width) is not int or type(height) is not int or width < 1 or height < 1:
        raise _Malformed(f"a page of {width!r} x {height!r} pixels")
    if width * height > max_pixels:
        raise _Malformed(f"a page of {width} x {height} pixels, over the cap of {max_pixels}")
    return width, height


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"a word of type {type(value).__name__}")
    return value


def _coordinate(value: JSON) -> float:
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"a coordinate that is {json_kind(value)}")
    return float(value)


def _word(row: JSON) -> Word:
    if not isinstance(row, list) or len(row) != 5:
        raise ValueError(f"a word that is {json_kind(row)}, not 5 values")
    text, x1, y1, x2, y2 = row
    return Word(_text(text), Box(_coordinate(x1), _coordinate(y1), _coordinate(x2), _coordinate(y2)))


def _page(message: JSONObject, raw: bytearray, number: int, size: tuple[int, int]) -> RenderedPage:
    """The page a worker sent, checked as hostile input: the parent trusts no worker."""
    from PIL import Image

    if message.get("n") != number:
        raise _Malformed(f"page {message.get('n')!r} where page {number} was due")
    dpi = message.get("dpi")
    if dpi is not None and (isinstance(dpi, bool) or not isinstance(dpi, (int, float)) or not 0 < dpi < 1e6):
        raise _Malformed(f"a dpi of {dpi!r}")
    rows = message.get("words", [])
    try:
        if not isinstance(rows, list):
            raise TypeError(f"{json_kind(rows)}, not a list")
        words = tuple(_word(row) for row in rows)
    except (TypeError, ValueError, EvidraError) as exc:
        raise _Malformed(f"words that are not [text, x1, y1, x2, y2] ({exc})") from None
    image = Image.frombytes("RGB", size, raw)
    return RenderedPage(number, image, words, None if dpi is None else float(dpi))


def _job(
    op: Literal["render", "title"], kind: DocKind, name: str, dpi: float, limits: Limits, data: bytes
) -> Job:
    return Job(op, kind, name, dpi, limits.max_pixels, limits.max_pages, limits.max_doc_pixels, data)


@dataclass
class _Talk:
    """One job on one worker: reads its replies, and turns every way it can fail into one line."""

    worker: _Worker
    job: Job
    limits: Limits
    cancel: threading.Event | None
    opened: bool = False
    pages: int = 0  # pages received
    clean: bool = False  # ended on a reply boundary: the worker can take another job

    def next(self) -> _Reply:
        deadline = time.monotonic() + self.limits.page_timeout_s
        try:
            message, log = _decode(self.worker.receive(MAX_REPLY_HEADER_BYTES, deadline, self.cancel))
            for line in log:
                logger.warning("%s", line)
            return self._reply(message, deadline)
        except _TooSlow:
            raise CorpusError(too_slow(self.job.name, self.limits.page_timeout_s, self.where)) from None
        except _Died:
            raise CorpusError(self._death()) from None
        except _Malformed as exc:
            renderer = _RENDERERS[self.job.kind]
            raise CorpusError(
                f"{self.job.name}: unreadable (the {renderer} sent a malformed reply {self.where}: {exc})"
            ) from None

    def _reply(self, message: JSONObject, deadline: float) -> _Reply:
        kind = str(message["t"])  # one of _REPLIES (``_decode``)
        if kind == "error":
            self.clean = True
            reason = str(message.get("message", "")).replace("\n", " ")[:MAX_REASON_CHARS]
            raise CorpusError(reason or f"{self.job.name}: unreadable")
        if kind == "page":
            width, height = _size(message, self.limits.max_pixels)
            raw = self.worker.receive(width * height * 3, deadline, self.cancel)
            if len(raw) != width * height * 3:
                raise _Malformed(f"{len(raw)} bytes for a {width} x {height} RGB page")
            page = _page(message, raw, self.pages + 1, (width, height))
            self.pages += 1
            return _Reply(kind, page=page)
        self.opened = self.opened or kind == "open"
        self.clean = kind in ("done", "title")
        title = message.get("title", "")
        return _Reply(kind, title=title[:300] if isinstance(title, str) else "")

    @property
    def where(self) -> str:
        return f"at page {self.pages + 1}" if self.opened else "while opening it"

    def _death(self) -> str:
        code = self.worker.exit_code()
        name, where, cap_mib = self.job.name, self.where, self.worker.memory_bytes >> 20
        if code in (EXIT_OUT_OF_MEMORY, -signal.SIGABRT):
            # PDFium's FX_OutOfMemoryTerminate calls abort() when an allocation fails; its other
            # fatal checks trap (SIGILL/SIGTRAP), and a bad pointer is SIGSEGV or SIGBUS
            return too_much_memory(name, cap_mib, where)
        if code == -signal.SIGKILL:
            return too_much_memory(name, cap_mib, where, by_system=True)
        if code is None:
            how = "its connection closed"
        else:
            how = _signal_name(-code) if code < 0 else f"exit code {code}"
        return crashed(name, _RENDERERS[self.job.kind], how, where)


class RenderPool:
    """Worker processes that parse and render documents, each under ``memory_bytes`` of address space.

    Each ``render`` or ``title`` call takes a worker of its own (an idle one, else a new one), so
    calls from several threads run side by side; at most ``max_idle`` workers wait for the next
    call. A worker whose job failed in any way but a refusal it sent itself is killed, never
    reused. ``close`` (or leaving a ``with`` block) stops the workers; those of a pool never
    closed are stopped when it is collected or at exit.
    """

    def __init__(self, memory_bytes: int = DEFAULT_MAX_WORKER_BYTES, *, max_idle: int = 1) -> None:
        self.memory_bytes = memory_bytes
        self.max_idle = max_idle
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._lock = threading.Lock()
        self.closed = False
        self._finalizer = weakref.finalize(self, _stop_all, self._idle, self._busy)

    def render(
        self,
        kind: DocKind,
        data: bytes,
        name: str,
        dpi: float,
        limits: Limits,
        cancel: threading.Event | None = None,
    ) -> Generator[RenderedPage, None, None]:
        """The pages of the document in ``data``, rendered by a worker, one at a time.

        ``limits.max_worker_bytes`` is ignored: the pool's ``memory_bytes`` caps its workers.
        Abandoning the iterator before its end kills the worker that was rendering.
        """
        talk = self._start(_job("render", kind, name, dpi, limits, data), limits, cancel)
        try:
            while (reply := talk.next()).kind != "done":
                if reply.page is not None:
                    yield reply.page
        finally:
            self._release(talk.worker, keep=talk.clean)

    def title(self, data: bytes, name: str, limits: Limits, cancel: threading.Event | None = None) -> str:
        """The PDF's ``/Title`` (``pdf_title``), read by a worker."""
        talk = self._start(_job("title", "pdf", name, 72.0, limits, data), limits, cancel)
        try:
            while (reply := talk.next()).kind != "title":
                pass
            return reply.title
        finally:
            self._release(talk.worker, keep=talk.clean)

    def worker_pids(self) -> list[int]:
        """The process ids of this pool's workers, idle and busy."""
        with self._lock:
            return [w.pid for w in [*self._idle, *self._busy]]

    def close(self) -> None:
        with self._lock:
            self.closed = True
            self._finalizer()

    def __enter__(self) -> RenderPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _start(self, job: Job, limits: Limits, cancel: threading.Event | None) -> _Talk:
        """Hand ``job`` to a worker; an idle one that died meanwhile is replaced by a new one."""
        failure: OSError | None = None
        for _ in range(2):
            worker = self._checkout(job.name)
            try:
                worker.send(job, limits.page_timeout_s)
                return _Talk(worker, job, limits, cancel)
            except OSError as exc:
                failure = exc
                code = worker.exit_code()
                self._release(worker, keep=False)
                if code in (EXIT_OUT_OF_MEMORY, -signal.SIGABRT):  # the file itself is over the cap
                    raise CorpusError(
                        too_much_memory(job.name, self.memory_bytes >> 20, "while receiving it")
                    ) from None
        raise CorpusError(f"{job.name}: no render worker took the file ({failure}); try again")

    def _checkout(self, name: str) -> _Worker:
        with self._lock:
            if self.closed:
                raise CorpusError(f"{name}: the render pool was closed")
            while self._idle:
                worker = self._idle.pop()
                if worker.alive():
                    self._busy.add(worker)
                    return worker
                worker.kill()
        try:
            worker = _Worker(self.memory_bytes)
        except OSError as exc:
            raise CorpusError(f"{name}: could not start a render worker ({exc})") from exc
        with self._lock:
            self._busy.add(worker)
        return worker

    def _release(self, worker: _Worker, *, keep: bool) -> None:
        with self._lock:
            self._busy.discard(worker)
            if keep and not self.closed and len(self._idle) < self.max_idle and worker.alive():
                self._idle.append(worker)
                return
        if keep:
            worker.stop()
        else:
            worker.kill()


MAX_SHARED_POOLS = 2
_shared: dict[int, RenderPool] = {}
_shared_lock = threading.Lock()


def shared_pool(memory_bytes: int) -> RenderPool:
    """The process's pool of workers capped at ``memory_bytes``, reused by every ``ingest`` call.

    A warm worker saves each call the ~0.3 s a new interpreter takes to start (the web app
    ingests one upload per call). Pools for other caps are closed beyond ``MAX_SHARED_POOLS``.
    """
    with _shared_lock:
        pool = _shared.get(memory_bytes)
        if pool is None or pool.closed:
            while len(_shared) >= MAX_SHARED_POOLS:
                _shared.pop(next(iter(_shared))).close()
            pool = _shared[memory_bytes] = RenderPool(memory_bytes)
        return pool
