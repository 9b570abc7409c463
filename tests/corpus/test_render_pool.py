"""Worker processes that render documents: same pages as in-process, and every way a worker can
fail (out of memory, stopped, crashed, cancelled, gone) costs that file only, in one line."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pdf_bombs import deflate_bomb, tiny_glyphs

from evidra.core.errors import CorpusError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.corpus import Cancelled, InProcess, Limits, RenderPool
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

render_pool = importlib.import_module("evidra.corpus.render_pool")

MIB = 1 << 20
SMALL_CAP = 256 * MIB
LIMITS = Limits(max_worker_bytes=SMALL_CAP, page_timeout_s=30)


def _pdf(n_pages: int) -> bytes:
    pages = []
    for i in range(n_pages):
        canvas = PdfCanvas(300, 200)
        canvas.text(20, 50, f"page number {i + 1}", 14)
        canvas.rect(20, 100, 120, 150, fill=(0.2, 0.4, 0.8))
        pages.append(canvas)
    return write_pdf(pages)


@pytest.fixture
def pool() -> Iterator[RenderPool]:
    with RenderPool(SMALL_CAP) as workers:
        yield workers


def _gone(pid: int, within_s: float = 10.0) -> bool:
    """True once no process ``pid`` exists (a zombie counts as existing), polling for ``within_s``."""
    stop = time.monotonic() + within_s
    while time.monotonic() < stop:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z" and not Path(f"/proc/{pid}").exists():
            return True
        time.sleep(0.05)
    return False


def test_a_worker_renders_what_the_process_itself_would(pool: RenderPool) -> None:
    data = _pdf(2)
    isolated = list(pool.render("pdf", data, "two.pdf", 72, LIMITS))
    direct = list(InProcess().render("pdf", data, "two.pdf", 72, LIMITS))
    assert [p.page_number for p in isolated] == [1, 2]
    for ours, theirs in zip(isolated, direct, strict=True):
        assert ours.image.mode == "RGB" and ours.image.size == theirs.image.size == (300, 200)
        assert ours.image.tobytes() == theirs.image.tobytes()  # PDFium's pixels, carried unchanged
        assert [w.text for w in ours.words] == [w.text for w in theirs.words]
        assert [w.text for w in ours.words] == ["page", "number", f"{ours.page_number}"]
        for mine, direct_word in zip(ours.words, theirs.words, strict=True):
            assert mine.box.as_tuple() == pytest.approx(direct_word.box.as_tuple())
    assert pool.title(data, "two.pdf", LIMITS) == ""
    assert len(pool.worker_pids()) == 1  # one worker did all three jobs


def test_a_memory_bomb_costs_its_worker_only(pool: RenderPool) -> None:
    list(pool.render("pdf", _pdf(1), "warm.pdf", 72, LIMITS))
    (first,) = pool.worker_pids()
    with pytest.raises(CorpusError) as caught:
        list(pool.render("pdf", deflate_bomb(512), "bomb.pdf", 72, LIMITS))
    assert str(caught.value) == (
        "bomb.pdf: too much memory (over the 256 MiB worker cap at page 1); if the file is trusted, raise "
        "the cap (--max-worker-mb 512, or Limits(max_worker_bytes=...)) or lower --dpi"
    )
    assert _gone(first)
    pages = list(pool.render("pdf", _pdf(2), "after.pdf", 72, LIMITS))  # a fresh worker
    assert [p.page_number for p in pages] == [1, 2] and pool.worker_pids() != [first]


def test_a_file_larger_than_the_worker_cap_is_refused_as_too_much_memory() -> None:
    with RenderPool(128 * MIB) as small, pytest.raises(CorpusError) as caught:
        list(small.render("pdf", b"%PDF-1.4\n" + bytes(200 * MIB), "huge.pdf", 72, LIMITS))
    assert str(caught.value).startswith(
        "huge.pdf: too much memory (over the 128 MiB worker cap while receiving it); if the file is trusted"
    )


def test_a_stopped_worker_is_killed_at_the_deadline(pool: RenderPool) -> None:
    limits = Limits(max_worker_bytes=SMALL_CAP, page_timeout_s=0.5)
    pages = pool.render("pdf", _pdf(3), "stuck.pdf", 72, limits)
    assert next(pages).page_number == 1
    (pid,) = pool.worker_pids()
    os.kill(pid, signal.SIGSTOP)  # stuck for good: the parent must not wait for it
    with pytest.raises(CorpusError, match=r"^stuck\.pdf: too slow \(over 0\.5 s at page [23]\); if the"):
        list(pages)
    assert _gone(pid) and pool.worker_pids() == []


@pytest.mark.parametrize(
    ("signum", "reason"),
    [
        (signal.SIGSEGV, "slow.pdf: unreadable (the PDF renderer (PDFium) crashed with SIGSEGV"),
        (signal.SIGABRT, "slow.pdf: too much memory (over the 256 MiB worker cap"),
        (signal.SIGKILL, "slow.pdf: too much memory (killed by the system's out-of-memory killer"),
    ],
)
def test_a_worker_that_dies_mid_file_is_named_by_how(pool: RenderPool, signum: int, reason: str) -> None:
    list(pool.render("pdf", _pdf(1), "warm.pdf", 72, LIMITS))
    (pid,) = pool.worker_pids()
    threading.Timer(0.3, os.kill, (pid, signum)).start()  # while it reads 300,000 glyphs
    with pytest.raises(CorpusError) as caught:
        list(pool.render("pdf", tiny_glyphs(300_000), "slow.pdf", 72, LIMITS))
    assert str(caught.value).startswith(reason)
    assert _gone(pid)


def test_cancel_stops_a_page_in_the_middle_and_kills_its_worker(pool: RenderPool) -> None:
    list(pool.render("pdf", _pdf(1), "warm.pdf", 72, LIMITS))
    (pid,) = pool.worker_pids()
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    with pytest.raises(Cancelled):
        list(pool.render("pdf", tiny_glyphs(300_000), "slow.pdf", 72, LIMITS, cancel))
    assert _gone(pid) and pool.worker_pids() == []


def test_a_refused_file_keeps_its_worker(pool: RenderPool, encrypted_pdf: bytes) -> None:
    with pytest.raises(CorpusError, match=r"locked\.pdf is encrypted"):
        list(pool.render("pdf", encrypted_pdf, "locked.pdf", 72, LIMITS))
    (pid,) = pool.worker_pids()
    with pytest.raises(CorpusError, match=r"long\.pdf has 3 pages, over the cap of 2 pages"):
        list(pool.render("pdf", _pdf(3), "long.pdf", 72, Limits(max_pages=2)))
    assert pool.worker_pids() == [pid]


def test_an_abandoned_render_kills_its_worker(pool: RenderPool) -> None:
    pages = pool.render("pdf", _pdf(3), "three.pdf", 72, LIMITS)
    assert next(pages).page_number == 1
    (pid,) = pool.worker_pids()
    pages.close()
    assert _gone(pid) and pool.worker_pids() == []


def test_threads_render_side_by_side_and_one_worker_stays(pool: RenderPool) -> None:
    results: dict[str, int] = {}

    def render(name: str) -> None:
        results[name] = len(list(pool.render("pdf", _pdf(2), name, 72, LIMITS)))

    threads = [threading.Thread(target=render, args=(f"{i}.pdf",)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert results == {"0.pdf": 2, "1.pdf": 2}
    assert len(pool.worker_pids()) == 1  # max_idle: the second worker was stopped


def test_replies_are_checked_as_hostile_input() -> None:
    malformed = render_pool._Malformed
    with pytest.raises(malformed, match="not JSON"):
        render_pool._decode(bytearray(b"\x80("))
    with pytest.raises(malformed, match="not a reply"):
        render_pool._decode(bytearray(b'{"t": "exec"}'))
    with pytest.raises(malformed, match="over the cap of 100"):
        render_pool._size({"w": 20, "h": 10}, 100)
    with pytest.raises(malformed, match="a page of True x 1"):
        render_pool._size({"w": True, "h": 1}, 100)
    assert render_pool._size({"w": 2, "h": 1}, 100) == (2, 1)
    page: JSONObject = {"n": 2, "w": 2, "h": 1, "dpi": None, "words": [["ok", 0, 0, 1, 1]]}
    with pytest.raises(malformed, match="page 2 where page 1 was due"):
        render_pool._page(page, bytearray(6), 1, (2, 1))
    with pytest.raises(malformed, match="words that are not"):
        render_pool._page({**page, "words": [["x", 1, 1, 0, 0]]}, bytearray(6), 2, (2, 1))  # x2 < x1
    assert [w.text for w in render_pool._page(page, bytearray(6), 2, (2, 1)).words] == ["ok"]


@pytest.mark.parametrize("words", ["words", {"a": 1}, 7, [["ok", 0, 0, 1]], [["ok", 0, None, 1, 1]], ["ok"]])
def test_a_page_reply_with_words_of_the_wrong_shape_is_malformed(words: JSON) -> None:
    page: JSONObject = {"n": 1, "w": 2, "h": 1, "dpi": None, "words": words}
    with pytest.raises(render_pool._Malformed, match="words that are not"):
        render_pool._page(page, bytearray(6), 1, (2, 1))


class _OneReply:
    """A worker that sends one reply header."""

    def __init__(self, header: bytes) -> None:
        self.header = header

    def receive(self, size: int, deadline: float, cancel: threading.Event | None) -> bytearray:
        return bytearray(self.header)


def test_a_reply_without_a_log_carries_no_warnings() -> None:
    # the log is optional (``_decode``): reading the reply's lines must not need it
    job = render_pool._job("render", "pdf", "a.pdf", 72.0, Limits(), b"")
    talk = render_pool._Talk(_OneReply(b'{"t": "done"}'), job, Limits(), None)
    assert talk.next().kind == "done" and talk.clean
    assert render_pool._decode(bytearray(b'{"t": "done"}')) == ({"t": "done"}, [])
    assert render_pool._decode(bytearray(b'{"t": "done", "log": ["w"]}'))[1] == ["w"]
    with pytest.raises(render_pool._Malformed, match="a log that is not a list of lines"):
        render_pool._decode(bytearray(b'{"t": "done", "log": ["w", 3]}'))


_EXIT_SCRIPT = """
import sys
from pathlib import Path
from evidra.corpus import Limits, ingest, shared_pool
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
root = Path(sys.argv[1])
(root / "docs").mkdir()
canvas = PdfCanvas(200, 100)
canvas.text(10, 50, "hello", 12)
(root / "docs" / "a.pdf").write_bytes(write_pdf([canvas]))
report = ingest(root / "docs", root / "store", dpi=36)
assert len(report.added) == 1, report
print(*shared_pool(Limits().max_worker_bytes).worker_pids(), flush=True)
if sys.argv[2] == "hang":
    import time
    time.sleep(600)
"""


def _run_script(tmp_path: Path, mode: str) -> tuple[subprocess.Popen[str], int]:
    """Run ``_EXIT_SCRIPT`` as a main script without ``if __name__ == "__main__"``, as users write them."""
    script = tmp_path / "ingest_once.py"
    script.write_text(_EXIT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), mode], stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    (pid,) = map(int, proc.stdout.readline().split())
    return proc, pid


def test_workers_stop_when_their_process_exits(tmp_path: Path) -> None:
    proc, worker = _run_script(tmp_path, "exit")
    assert proc.wait(60) == 0
    assert proc.stdout is not None and proc.stdout.read() == ""  # the workers did not run the script again
    assert _gone(worker)


def test_workers_exit_when_their_process_is_killed(tmp_path: Path) -> None:
    proc, worker = _run_script(tmp_path, "hang")
    proc.kill()  # no atexit runs: the worker notices it is orphaned
    proc.wait(60)
    assert _gone(worker)
