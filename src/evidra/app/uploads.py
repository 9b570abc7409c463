"""Uploads as jobs: each file is written to disk as it arrives, then ingested and indexed on a
thread of its own, while the data thread goes on answering searches, documents and ``/health``.

A job's life: the body streams into a fresh folder under the system's temporary folder
(``evidra-upload.<pid>.*``: removed when the job ends; what a killed server left there is
removed at the next start), and the job is ``queued``. One *ingest* thread takes the jobs in
turn: ``ingesting`` runs ``evidra.corpus.ingest.ingest`` over the folder with the thread's own
``PageStore`` connection (the store's SQLite file is in WAL mode, so the data thread reads the
last committed state meanwhile and is never blocked by the long write of a large file);
``indexing`` adds the new pages to the index on the data thread (the engine never leaves it);
the job ends ``done``, ``failed`` (nothing of the file was stored: ``failed`` says why) or
``cancelled``.

At most ``max_in_flight`` uploads are being received, queued or ingested at once (``Busy``
beyond it, answered 503): each holds up to one upload's bytes on disk. A cancel sets the job's
event: a queued job never starts; a running ingest checks the event between pages and drops the
file whole. The last ``KEEP_ENDED`` ended jobs stay listed, so a client can read how its upload
ended.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, TYPE_CHECKING, Literal, TypedDict, TypeVar, TypeVarTuple, Unpack

from evidra.app.errors import Busy, NotFound
from evidra.core.jsonvalue import JSONObject
from evidra.safeio.staging import pid_in_name, process_alive

if TYPE_CHECKING:
    from evidra.corpus.ingest import FailedFile, IngestProgress, IngestReport
    from evidra.corpus.store import PageStore

logger = logging.getLogger(__name__)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
JobState = Literal["queued", "ingesting", "indexing", "done", "failed", "cancelled"]
ENDED: frozenset[str] = frozenset({"done", "failed", "cancelled"})
KEEP_ENDED = 100  # ended jobs listed, the newest
TEMP_PREFIX = "evidra-upload."
IndexNew = Callable[[Callable[[int, int], None]], int]  # adds new pages to the index, with progress


@dataclass(frozen=True)
class Upload:
    """Where one upload job stands: a snapshot, replaced as the job goes on."""

    id: str
    name: str  # the relative path it is stored under (``workspace.upload_name``)
    size: int  # bytes received
    received: float  # time.time() when its body had arrived
    state: JobState = "queued"
    files_done: int = 0
    files_total: int = 1
    pages_done: int = 0  # pages stored so far, or found already stored
    added: int = 0  # pages stored
    unchanged: int = 0  # pages already in the store (the same bytes, maybe under another name)
    index_done: int = 0
    index_total: int = 0
    indexed: int = 0  # pages the index took in (this upload's, and any other it lacked)
    failed: tuple[FailedFile, ...] = ()  # what was not read, and why
    error: str = ""  # why the job failed beyond a file (the index could not take the pages)
    cancel_requested: bool = False
    ended: float | None = None

    def as_json(self) -> JSONObject:
        seconds = (self.ended or time.time()) - self.received
        return {
            "id": self.id,
            "name": self.name,
            "bytes": self.size,
            "state": self.state,
            "files_done": self.files_done,
            "files_total": self.files_total,
            "pages_done": self.pages_done,
            "added": self.added,
            "unchanged": self.unchanged,
            "index_done": self.index_done,
            "index_total": self.index_total,
            "indexed": self.indexed,
            "failed": [{"file": f.path, "reason": f.reason} for f in self.failed],
            "error": self.error,
            "cancel_requested": self.cancel_requested,
            "seconds": round(seconds, 2),
        }


class _Changes(TypedDict, total=False):
    """The fields of ``Upload`` that a job's progress replaces."""

    state: JobState
    files_done: int
    files_total: int
    pages_done: int
    added: int
    unchanged: int
    index_done: int
    index_total: int
    indexed: int
    failed: tuple[FailedFile, ...]
    error: str
    ended: float | None


@dataclass
class _Run:
    """What a job that has not ended holds: its folder, its cancel event, its place in the queue."""

    folder: Path
    cancel: threading.Event
    future: Future[None] | None = None


class Incoming:
    """An upload being received: a fresh folder, the file its bytes go to, and the in-flight slot
    it holds (passed on to its job, or given back by ``discard``)."""

    def __init__(self, name: str, release: Callable[[], None]) -> None:
        self.name = name
        self._release: Callable[[], None] | None = release
        self.folder = Path(tempfile.mkdtemp(prefix=f"{TEMP_PREFIX}{os.getpid()}."))
        try:
            path = self.folder / name
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file: IO[bytes] = path.open("xb")
        except BaseException:
            shutil.rmtree(self.folder, ignore_errors=True)
            raise

    async def write(self, piece: bytes) -> None:
        await asyncio.to_thread(self._file.write, piece)  # a slow disk never holds the event loop

    def handed_over(self) -> None:
        """The file is complete; its slot is now its job's, given back when the job ends."""
        self._file.close()
        self._release = None

    def discard(self) -> None:
        """The body did not arrive whole: drop what did, and give the slot back."""
        self._file.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self._release is not None:
            self._release()
            self._release = None


def remove_leftovers() -> int:
    """Remove upload folders of servers that no longer run; returns how many."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"):
        pid = pid_in_name(path.name, 1)
        if pid is None or process_alive(pid) or path.is_symlink() or not path.is_dir():
            continue
        if path.lstat().st_uid != os.getuid():  # a shared temp folder: only this user's own
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


class Uploads:
    """The upload jobs of one workspace: see the module docstring. ``index_new`` runs on the
    ingest thread and adds the store's new pages to the index (on the data thread)."""

    def __init__(self, store_root: Path, index_new: IndexNew) -> None:
        self.store_root = store_root
        self._index_new = index_new
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evidra-ingest")
        self._store: PageStore | None = None  # ingest thread only
        self._lock = threading.Lock()  # guards everything below
        self._jobs: dict[str, Upload] = {}  # in arrival order
        self._runs: dict[str, _Run] = {}
        self._in_flight = 0
        self._closed = False

    # -- on the event loop -------------------------------------------------------------------

    def receive(self, name: str, max_in_flight: int) -> Incoming:
        """A slot and a file for the upload ``name``; ``Busy`` when ``max_in_flight`` uploads are
        being received, queued or ingested already."""
        with self._lock:
            if self._closed:
                raise Busy("the server is stopping; upload again once it runs")
            if self._in_flight >= max_in_flight:
                raise Busy(
                    f"the server takes {max_in_flight} uploads at once and has {self._in_flight} in "
                    "flight; send this one again when one has ended (GET /api/uploads lists them)"
                )
            self._in_flight += 1
        try:
            return Incoming(name, self._release)
        except BaseException:
            self._release()
            raise

    def submit(self, incoming: Incoming, size: int) -> Upload:
        """The received upload as a queued job."""
        with self._lock:
            closed = self._closed
        if closed:
            incoming.discard()
            raise Busy("the server is stopping; upload again once it runs")
        incoming.handed_over()
        job = Upload(uuid.uuid4().hex[:16], incoming.name, size, time.time())
        with self._lock:
            self._jobs[job.id] = job
            self._runs[job.id] = _Run(incoming.folder, threading.Event())
            self._prune()
        try:
            future = self._thread.submit(self._run, job.id)
        except RuntimeError:  # closed meanwhile
            self._end(job.id, "cancelled")
            raise Busy("the server is stopping; upload again once it runs") from None
        with self._lock:
            if job.id in self._runs:
                self._runs[job.id].future = future
        return job

    def get(self, job_id: str) -> Upload:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            raise NotFound(f"no upload {job_id[:40]!r}; GET /api/uploads lists them")
        return job

    def all(self) -> list[Upload]:
        with self._lock:
            return list(self._jobs.values())

    def cancel(self, job_id: str) -> Upload:
        """Cancel the job (an ended one is left as it ended); its state as it is now."""
        self.get(job_id)
        with self._lock:
            run = self._runs.get(job_id)
            if run is not None:
                run.cancel.set()
                self._jobs[job_id] = replace(self._jobs[job_id], cancel_requested=True)
        if run is not None and run.future is not None and run.future.cancel():
            self._end(job_id, "cancelled")  # it never started
        return self.get(job_id)

    async def after_jobs(self, fn: Callable[[Unpack[Ts]], T], *args: Unpack[Ts]) -> T:
        """``fn(*args)`` on the ingest thread, once the jobs queued before it have ended."""
        return await asyncio.wrap_future(self._thread.submit(fn, *args))

    def close(self) -> None:
        """Cancel every job, wait for the one running, release the store."""
        with self._lock:
            self._closed = True
            runs = list(self._runs.items())
        for job_id, run in runs:
            run.cancel.set()
            if run.future is not None and run.future.cancel():
                self._end(job_id, "cancelled")
        self._thread.submit(self._close_store).result()
        self._thread.shutdown()

    # -- on the ingest thread ------------------------------------------------------------------

    def _run(self, job_id: str) -> None:
        try:
            state, error = self._work(job_id)
        except Exception as exc:  # a job's failure is its state; the thread goes on with the next
            logger.warning("upload %s failed: %s", job_id, exc)
            state, error = "failed", _one_line(exc)
        self._end(job_id, state, error)

    def _work(self, job_id: str) -> tuple[JobState, str]:
        from evidra.corpus.ingest import ingest

        with self._lock:
            run = self._runs[job_id]
        if run.cancel.is_set():
            return "cancelled", ""
        self._update(job_id, state="ingesting")
        report = ingest(run.folder, self._opened(), progress=self._progress(job_id), cancel=run.cancel)
        self._update(job_id, added=len(report.added), unchanged=len(report.skipped), failed=report.failed)
        if not report.added and not report.skipped:
            return self._unread(job_id, report)
        if report.added:
            self._update(job_id, state="indexing", index_total=len(report.added))
            try:
                indexed = self._index_new(
                    lambda done, total: self._update(job_id, index_done=done, index_total=total)
                )
            except Exception as exc:
                reason = _one_line(exc)
                return "failed", f"its pages are stored but not indexed ({reason}); POST /api/index adds them"
            self._update(job_id, indexed=indexed)
        return "done", ""

    def _unread(self, job_id: str, report: IngestReport) -> tuple[JobState, str]:
        """Nothing of the upload was stored: cancelled, or failed with ingest's reason."""
        if report.cancelled:
            return "cancelled", ""
        if not report.failed:  # ingest found no document in the folder: never end with nothing said
            return "failed", f"{self.get(job_id).name} was not read as a document"
        return "failed", ""

    def _progress(self, job_id: str) -> Callable[[IngestProgress], None]:
        def report(p: IngestProgress) -> None:
            self._update(job_id, files_done=p.files_done, files_total=p.files_total, pages_done=p.pages)

        return report

    def _opened(self) -> PageStore:
        from evidra.corpus.store import PageStore

        if self._store is None:
            self._store = PageStore.create(self.store_root)
        return self._store

    def _close_store(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- either side ---------------------------------------------------------------------------

    def _update(self, job_id: str, **changes: Unpack[_Changes]) -> None:
        if changes.get("state") in ENDED:
            changes["ended"] = time.time()
        with self._lock:
            self._jobs[job_id] = replace(self._jobs[job_id], **changes)

    def _end(self, job_id: str, state: JobState, error: str = "") -> None:
        """The job ended: record how, remove its folder, give its slot back."""
        with self._lock:
            run = self._runs.pop(job_id, None)
        if run is None:
            return
        self._update(job_id, state=state, error=error)
        shutil.rmtree(run.folder, ignore_errors=True)
        self._release()
        logger.info("upload %s (%s) %s", job_id, self.get(job_id).name, state)

    def _release(self) -> None:
        with self._lock:
            self._in_flight -= 1

    def _prune(self) -> None:
        """Forget the oldest ended jobs beyond ``KEEP_ENDED`` (under the lock)."""
        ended = [job_id for job_id, job in self._jobs.items() if job.state in ENDED]
        for job_id in ended[: max(0, len(ended) - KEEP_ENDED)]:
            del self._jobs[job_id]


def _one_line(exc: Exception) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:400] if text else type(exc).__name__
