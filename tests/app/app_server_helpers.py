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
