"""Helpers of the app tests: fill a running server with documents, read NDJSON, map page ids."""

from __future__ import annotations

import json
from typing import Any

import httpx

from evidra.data.synth.documents import SynthCorpus


def lines(response: httpx.Response) -> list[dict[str, Any]]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


def fill(url: str, corpus: SynthCorpus) -> None:
    for pdf in sorted(corpus.docs_dir.glob("*.pdf")):
        got = httpx.post(
            f"{url}/api/upload", params={"name": f"reports/{pdf.name}"}, content=pdf.read_bytes()
        )
        assert got.status_code == 200 and got.json()["added"] >= 1, got.text
    events = lines(httpx.post(f"{url}/api/index", timeout=60))
    assert events[-1]["type"] == "done" and events[-1]["added"] == sum(
        len(d.page_ids) for d in corpus.documents
    )
    assert [e["done"] for e in events if e["type"] == "progress"][-1] == events[-1]["added"]


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
    got = httpx.post(f"{url}/api/upload", params={"name": "manual.pdf"}, content=write_pdf(pages))
    assert got.status_code == 200 and got.json()["added"] == len(MANUAL), got.text
    assert lines(httpx.post(f"{url}/api/index", timeout=60))[-1]["type"] == "done"
