"""Helpers of the app tests: upload files and wait for their jobs, fill a running server with
documents, read NDJSON, map page ids."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx

from evidra.data.synth.documents import SynthCorpus


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


ENDED = ("done", "failed", "cancelled")


def wait_job(url: str, job: dict[str, Any], timeout_s: float = 60) -> dict[str, Any]:
    """The upload job once it has ended."""
    deadline = time.monotonic() + timeout_s
    while job["state"] not in ENDED:
        assert time.monotonic() < deadline, job
        time.sleep(0.05)
        job = httpx.get(f"{url}/api/uploads/{job['id']}").json()
    return job


def upload(url: str, name: str, data: bytes) -> dict[str, Any]:
    """Upload one file (answered 202 with its job at once) and wait for the job to end."""
    got = httpx.post(f"{url}/api/upload", params={"name": name}, content=data)
    assert got.status_code == 202, got.text
    assert got.headers["location"] == f"/api/uploads/{got.json()['id']}"
    return wait_job(url, got.json())


def fill(url: str, corpus: SynthCorpus) -> None:
    """Every document of ``corpus`` uploaded under ``reports/``; each job indexes its pages."""
    indexed = 0
    for pdf in sorted(corpus.docs_dir.glob("*.pdf")):
        job = upload(url, f"reports/{pdf.name}", pdf.read_bytes())
        assert job["state"] == "done" and job["added"] >= 1, job
        assert job["index_done"] == job["index_total"] == job["indexed"] == job["added"], job
        indexed += job["indexed"]
    assert indexed == sum(len(d.page_ids) for d in corpus.documents)
    assert lines(httpx.post(f"{url}/api/index", timeout=60)) == [{"type": "done", "added": 0}]


def page_sources(url: str) -> dict[str, tuple[str, int]]:
    """Page id -> (document, page number) for every page the server holds."""
    import json
    import urllib.request

    with urllib.request.urlopen(f"{url}/api/documents", timeout=30) as response:
        documents = json.load(response)["documents"]
    out = {}
    for d in documents:
        prefix = d["first_page"].rsplit("-p", 1)[0]
        out.update({f"{prefix}-p{n:04d}": (d["source"], n) for n in range(1, d["pages"] + 1)})
    return out


MANUAL = (  # one page each: the follow-up "And what about its return?" alone finds the third
    "The Falcon pump moves water at forty litres per minute.",
    "The Heron valve holds a pressure of twelve bar.",
    "Return policy: every return is accepted within thirty days; a return needs the receipt.",
)


def upload_manual(url: str) -> None:
    """``manual.pdf`` (the three ``MANUAL`` pages) uploaded and indexed."""
    from evidra.corpus.pdfwriter import PdfCanvas, write_pdf

    pages = []
    for text in MANUAL:
        canvas = PdfCanvas(420, 200)
        canvas.text(20, 60, text, 11)
        pages.append(canvas)
    job = upload(url, "manual.pdf", write_pdf(pages))
    assert job["state"] == "done" and job["added"] == job["indexed"] == len(MANUAL), job
