"""The worker side of ``render_pool``: a process that parses and renders documents for its parent.

PDFium and Pillow are C code that a hostile file can drive to take all memory (a Form XObject
that draws itself twice grows PDFium past 4 GB in 18 s, then it aborts), all time, or a crash.
Run here, that costs this process only: it caps its own address space (``RLIMIT_AS``) before it
touches a document, its parent kills it when a page takes too long, and it exits by itself when
its parent is gone.

Wire format, over a Unix stream socket: frames of an 8-byte big-endian length and a payload.
A worker says ``{"t": "ready"}`` once it has started. A job is a JSON header ``{"op": "render"
| "title", "kind": "pdf" | "image", "name", "dpi", "max_pixels", "max_pages",
"max_doc_pixels"}`` then a frame with the file's bytes; ``{"op": "quit"}`` ends the worker. A
render job is answered by ``{"t": "open", "pages": n}``, then per page ``{"t": "page", "n",
"w", "h", "dpi", "words": [[text, x1, y1, x2, y2], ...]}`` followed by a frame of ``w * h * 3``
RGB bytes, then ``{"t": "done"}``; a title job by ``{"t": "title", "title"}``; a file that
breaks a cap or cannot be read by ``{"t": "error", "message"}``. Every reply also carries
``"log"``: the warnings logged since the last reply, which the parent logs. Replies are JSON
and raw bytes, never pickles: the parent runs nothing a worker sends.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import CorpusError
from evidra.corpus.renderer import DocKind, render_document

if TYPE_CHECKING:
    from evidra.corpus.pdf import RenderedPage

FRAME_HEAD = struct.Struct(">Q")
MAX_JOB_HEADER_BYTES = 1 << 16
MAX_REPLY_HEADER_BYTES = 64 << 20  # a page's words as JSON; real pages need well under 1 MiB
EXIT_OUT_OF_MEMORY = 3  # a MemoryError in Python; PDFium itself aborts (SIGABRT) when out of memory
EXIT_ORPHANED = 4
ORPHAN_POLL_S = 0.5
MAX_LOG_LINES = 20  # warnings forwarded with one reply


@dataclass(frozen=True)
class Job:
    """One request of the parent: render a document's pages, or read its title."""

    op: Literal["render", "title"]
    kind: DocKind
    name: str
    dpi: float
    max_pixels: int
    max_pages: int
    max_doc_pixels: int
    data: bytes

    def header(self) -> dict[str, object]:
        return {
            "op": self.op,
            "kind": self.kind,
            "name": self.name,
            "dpi": self.dpi,
            "max_pixels": self.max_pixels,
            "max_pages": self.max_pages,
            "max_doc_pixels": self.max_doc_pixels,
        }


class _Warnings(logging.Handler):
    """Keeps the warnings logged while a job runs; they travel to the parent with the next reply."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < MAX_LOG_LINES:
            self.lines.append(record.getMessage()[:1000])

    def drain(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines


def send_frame(sock: socket.socket, payload: bytes | bytearray) -> None:
    if len(payload) < 1 << 16:  # one system call for the small frames
        sock.sendall(FRAME_HEAD.pack(len(payload)) + payload)
    else:
        sock.sendall(FRAME_HEAD.pack(len(payload)))
        sock.sendall(payload)


def encode(message: Mapping[str, object]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode("utf-8")


def _recv_blocking(sock: socket.socket, size: int) -> bytes | None:
    """Exactly ``size`` bytes, or None when the other end closed first."""
    data = sock.recv(size, socket.MSG_WAITALL) if size else b""
    chunks = [data]
    got = len(data)
    while got < size:  # MSG_WAITALL returns early on a signal
        more = sock.recv(size - got, socket.MSG_WAITALL)
        if not more:
            return None
        chunks.append(more)
        got += len(more)
    return data if len(chunks) == 1 else b"".join(chunks)


def _read_frame(sock: socket.socket, max_bytes: int | None) -> bytes | None:
    head = _recv_blocking(sock, FRAME_HEAD.size)
    if head is None:
        return None
    (size,) = FRAME_HEAD.unpack(head)
    if max_bytes is not None and size > max_bytes:
        raise ConnectionError(f"a job header of {size} bytes, over {max_bytes}")
    return _recv_blocking(sock, size)


def _read_job(sock: socket.socket) -> Job | None:
    """The next job, or None when the parent said quit or is gone."""
    head = _read_frame(sock, MAX_JOB_HEADER_BYTES)
    if head is None:
        return None
    fields = json.loads(head)
    if fields.get("op") == "quit":
        return None
    data = _read_frame(sock, None)
    if data is None:
        return None
    return Job(data=data, **fields)


def _cap_address_space(limit: int) -> None:
    """Cap this process's address space: past it PDFium's allocations fail (and it aborts)."""
    try:
        import resource
    except ImportError:  # not a Unix: the deadline still holds, the memory cap cannot
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def _exit_when_orphaned(parent_pid: int) -> None:
    """Exit when the parent is gone, even in the middle of a page (PDFium calls release the GIL)."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(ORPHAN_POLL_S)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, name="evidra-render-orphan-watch", daemon=True).start()


@dataclass
class _Replies:
    """The worker's end of the socket; every reply carries the warnings logged since the last."""

    sock: socket.socket
    warnings: _Warnings
    name: str = ""  # the document of the job being answered

    def send(self, message: Mapping[str, object], raw: bytes | None = None) -> None:
        head = encode({**message, "log": self.warnings.drain()})
        if len(head) > MAX_REPLY_HEADER_BYTES:
            where = f"page {message['n']}" if "n" in message else "its title"
            raise CorpusError(
                f"{self.name}: {where} has {len(head) >> 20} MiB of text, over the cap of "
                f"{MAX_REPLY_HEADER_BYTES >> 20} MiB; the file is damaged or hostile"
            )
        send_frame(self.sock, head)
        if raw is not None:
            send_frame(self.sock, raw)


def _pages(job: Job, replies: _Replies) -> Iterator[RenderedPage]:
    def opened(pages: int) -> None:
        replies.send({"t": "open", "pages": pages})

    return render_document(
        job.kind,
        job.data,
        job.name,
        job.dpi,
        max_pixels=job.max_pixels,
        max_pages=job.max_pages,
        max_doc_pixels=job.max_doc_pixels,
        on_open=opened,
    )


def _send_page(replies: _Replies, page: RenderedPage) -> None:
    image = page.image
    message = {
        "t": "page",
        "n": page.page_number,
        "w": image.width,
        "h": image.height,
        "dpi": page.dpi,
        "words": [[w.text, w.box.x1, w.box.y1, w.box.x2, w.box.y2] for w in page.words],
    }
    replies.send(message, (image if image.mode == "RGB" else image.convert("RGB")).tobytes())


def _answer(replies: _Replies, job: Job) -> None:
    replies.name = job.name
    if job.op == "title":
        from evidra.corpus.pdf import pdf_title

        replies.send({"t": "title", "title": pdf_title(job.data, job.name)})
        return
    for page in _pages(job, replies):
        _send_page(replies, page)
    replies.send({"t": "done"})


def serve(sock: socket.socket, memory_bytes: int, parent_pid: int) -> None:
    """A worker process's main loop: cap memory, then answer jobs until told to quit.

    A file that breaks a cap or cannot be read is answered with its one-line reason and the
    worker takes the next job. A ``MemoryError`` ends the worker (its heap is suspect) with
    ``EXIT_OUT_OF_MEMORY``; PDFium ends it itself, aborting when an allocation fails.
    """
    _cap_address_space(memory_bytes)
    _exit_when_orphaned(parent_pid)
    warnings = _Warnings()
    logging.getLogger().addHandler(warnings)  # the parent logs them: this process has no console
    replies = _Replies(sock, warnings)
    # loaded before "ready", so that no job's deadline pays for them
    import PIL.Image  # noqa: F401
    import pypdfium2  # noqa: F401

    replies.send({"t": "ready"})
    with sock:
        while True:
            try:
                job = _read_job(sock)
            except OSError:  # the parent is gone
                return
            except MemoryError:  # a file larger than this worker's cap allows
                os._exit(EXIT_OUT_OF_MEMORY)
            if job is None:
                return
            try:
                _answer(replies, job)
            except CorpusError as exc:
                replies.send({"t": "error", "message": str(exc)})
            except MemoryError:
                os._exit(EXIT_OUT_OF_MEMORY)
            except OSError:  # the parent closed its end: nobody to answer
                return
            except Exception as exc:  # a bug, not the file: still one line, and the next job
                replies.send({"t": "error", "message": f"{job.name}: {type(exc).__name__}: {exc}"})


def main(argv: list[str]) -> None:
    """``render_pool`` starts a worker as ``main([socket fd, memory cap in bytes, parent pid])``."""
    fd, memory_bytes, parent_pid = (int(arg) for arg in argv)
    serve(socket.socket(fileno=fd), memory_bytes, parent_pid)
