"""Uploads as jobs: ``/health``, search and documents answer while a file is being written to the
store; a job shows its progress and can be cancelled; uploads in flight are capped (503); bodies go
to disk, not memory; names ingest does not read are refused up front (415)."""

from __future__ import annotations

import importlib
import os
import sqlite3
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_server_helpers import upload, wait_job

from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.uploads import TEMP_PREFIX, remove_leftovers
from evidra.app.workspace import Workspace
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
from evidra.corpus.store import DB_NAME


def pdf(*texts: str) -> bytes:
    pages = []
    for text in texts:
        canvas = PdfCanvas(300, 200)
        canvas.text(20, 60, text, 11)
        pages.append(canvas)
    return write_pdf(pages)


THREE_PAGES = pdf("The walrus sleeps on ice.", "The heron waits by the river.", "The fox runs at night.")


@dataclass
class Gate:
    """Ingest held after its first page is stored (the file's write transaction open) until
    released; the first ``let_through`` ingests pass."""

    reached: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    let_through: int = 0


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    ingest_module = importlib.import_module("evidra.corpus.ingest")  # the package re-exports the function
    real = ingest_module.ingest
    gate = Gate()

    def held(root: Any, store: Any, *, progress: Any = None, **kwargs: Any) -> Any:
        def report(p: Any) -> None:
            if progress is not None:
                progress(p)
            if p.pages >= 1 and not gate.reached.is_set():
                gate.reached.set()
                assert gate.release.wait(30), "the test never released the ingest"

        if gate.let_through > 0:
            gate.let_through -= 1
            return real(root, store, progress=progress, **kwargs)
        return real(root, store, progress=report, **kwargs)

    monkeypatch.setattr(ingest_module, "ingest", held)
    try:
        yield gate
    finally:
        gate.release.set()


def _served(tmp_path: Path, **options: Any) -> Iterator[tuple[str, Workspace]]:
    workspace = Workspace(tmp_path / "store")
    workspace.start_sync()
    try:
        with running(workspace, ServeOptions(access_log=False, **options)) as url:
            yield url, workspace
    finally:
        workspace.close()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, Workspace]]:
    yield from _served(tmp_path)


def _post(url: str, name: str, data: bytes) -> httpx.Response:
    return httpx.post(f"{url}/api/upload", params={"name": name}, content=data)


def _job(url: str, job_id: str) -> dict[str, Any]:
    return httpx.get(f"{url}/api/uploads/{job_id}").json()


def test_health_search_and_documents_answer_while_a_file_is_written(
    server: tuple[str, Workspace], gate: Gate
) -> None:
    url, workspace = server
    gate.let_through = 1
    assert upload(url, "first.pdf", pdf("The walrus sleeps on ice."))["state"] == "done"
    started = _post(url, "animals/more.pdf", THREE_PAGES)
    assert started.status_code == 202 and started.json()["state"] in ("queued", "ingesting")
    assert gate.reached.wait(30)  # its first page is stored, in a transaction not yet committed
    assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok", "documents": 1, "model": False}
    hits = httpx.get(f"{url}/api/search", params={"q": "walrus"}, timeout=5).json()["hits"]
    assert [h["document"] for h in hits] == ["first.pdf"]
    assert [d["source"] for d in httpx.get(f"{url}/api/documents", timeout=5).json()["documents"]] == [
        "first.pdf"
    ]
    job = _job(url, started.json()["id"])
    assert job["state"] == "ingesting" and job["pages_done"] == 1 and job["name"] == "animals/more.pdf"
    gate.release.set()
    job = wait_job(url, job)
    assert (job["state"], job["added"], job["pages_done"], job["indexed"]) == ("done", 3, 3, 3)
    assert httpx.get(f"{url}/api/search", params={"q": "heron"}).json()["hits"][0]["document"] == (
        "animals/more.pdf"
    )
    with sqlite3.connect(workspace.store_root / DB_NAME) as conn:  # readers never wait for a writer
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_queued_upload_is_cancelled_before_it_starts(server: tuple[str, Workspace], gate: Gate) -> None:
    url, _ = server
    running_one = _post(url, "a.pdf", THREE_PAGES).json()
    assert gate.reached.wait(30)
    queued = _post(url, "b.pdf", pdf("Never read.")).json()
    assert _job(url, queued["id"])["state"] == "queued"
    cancelled = httpx.delete(f"{url}/api/uploads/{queued['id']}")
    assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
    gate.release.set()
    assert wait_job(url, running_one)["state"] == "done"
    assert [d["source"] for d in httpx.get(f"{url}/api/documents").json()["documents"]] == ["a.pdf"]
    ended = httpx.delete(f"{url}/api/uploads/{running_one['id']}")  # an ended job stays as it ended
    assert ended.status_code == 200 and ended.json()["state"] == "done"
    assert httpx.delete(f"{url}/api/uploads/nope").status_code == 404


def test_a_running_upload_is_cancelled_between_pages_and_stores_nothing(
    server: tuple[str, Workspace], gate: Gate
) -> None:
    url, _ = server
    job = _post(url, "long.pdf", THREE_PAGES).json()
    assert gate.reached.wait(30)  # one page stored, two to go
    asked = httpx.delete(f"{url}/api/uploads/{job['id']}").json()
    assert asked["state"] == "ingesting" and asked["cancel_requested"] is True
    gate.release.set()
    ended = wait_job(url, job)
    assert (ended["state"], ended["added"]) == ("cancelled", 0), ended
    assert httpx.get(f"{url}/api/documents").json()["documents"] == []
    assert httpx.get(f"{url}/api/search", params={"q": "walrus"}).json()["hits"] == []


def test_uploads_past_the_cap_get_503_with_retry_after(tmp_path: Path, gate: Gate) -> None:
    for url, _ in _served(tmp_path, max_uploads=1, max_upload=4096):
        first = _post(url, "a.pdf", THREE_PAGES).json()
        assert gate.reached.wait(30)
        refused = _post(url, "b.pdf", pdf("Wait your turn."))
        assert refused.status_code == 503 and refused.headers["retry-after"] == "2"
        assert refused.json()["error"].startswith("the server takes 1 uploads at once and has 1 in flight")
        assert [j["name"] for j in httpx.get(f"{url}/api/uploads").json()["uploads"]] == ["a.pdf"]
        gate.release.set()
        assert wait_job(url, first)["state"] == "done"
        over = _post(url, "c.pdf", b"x" * 5000)  # a body refused for its size gives its slot back
        assert over.status_code == 413
        assert upload(url, "b.pdf", pdf("Wait your turn."))["state"] == "done"


@pytest.mark.parametrize("name", ["page.html", "drawing.svg", "README", "notes.txt"])
def test_a_name_ingest_does_not_read_is_refused_up_front(server: tuple[str, Workspace], name: str) -> None:
    url, _ = server
    got = _post(url, name, b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>")
    assert got.status_code == 415, got.text
    assert got.json()["error"] == (
        f"{name!r} is not a document evidra reads; upload .bmp, .jpeg, .jpg, .pdf, .png, .tif, .tiff, "
        ".webp files"
    )
    assert httpx.get(f"{url}/api/uploads").json()["uploads"] == []


def _upload_folders() -> list[Path]:
    return sorted(Path(tempfile.gettempdir()).glob(f"{TEMP_PREFIX}*"))


def test_an_upload_is_written_to_disk_and_removed_when_its_job_ends(
    tmp_path: Path, gate: Gate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    for url, _ in _served(tmp_path, max_upload=4096):
        job = _post(url, "docs/a.pdf", THREE_PAGES).json()
        assert gate.reached.wait(30)
        (folder,) = _upload_folders()
        assert (folder / "docs" / "a.pdf").read_bytes() == THREE_PAGES and job["bytes"] == len(THREE_PAGES)
        gate.release.set()
        wait_job(url, job)
        assert _upload_folders() == []
        assert _post(url, "b.pdf", b"x" * 5000).status_code == 413
        assert _upload_folders() == []


def test_upload_folders_of_servers_that_stopped_are_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ended = subprocess.Popen(["true"])
    ended.wait()
    dead = tmp_path / f"{TEMP_PREFIX}{ended.pid}.abc"
    alive = tmp_path / f"{TEMP_PREFIX}{os.getpid()}.def"
    other = tmp_path / "evidra-upload-other"
    for folder in (dead, alive, other):
        (folder / "x").mkdir(parents=True)
    assert remove_leftovers() == 1
    assert not dead.exists() and alive.exists() and other.exists()
