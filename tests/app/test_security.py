"""Every response carries ``nosniff`` and the content security policy; the pages hold no inline
script; a page image is served only as the PNG, JPEG or WebP its bytes are, never as the SVG or
HTML a planted image path names (which would run script on the app's origin)."""

from __future__ import annotations

import io
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from app_server_helpers import upload
from PIL import Image
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.testclient import TestClient

from evidra.app.headers import CONTENT_SECURITY_POLICY, SecurityHeaders
from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import Workspace
from evidra.corpus.pdfwriter import PdfCanvas, write_pdf
from evidra.corpus.store import DB_NAME

SVG = b"<svg xmlns='http://www.w3.org/2000/svg'><script>fetch('/api/documents')</script></svg>"
HTML = b"<html><script>fetch('/api/documents')</script></html>"
INLINE_SCRIPT = re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Workspace, list[str]]]:
    """A server holding one three-page document; yields its URL, workspace and page ids."""
    workspace = Workspace(tmp_path / "store")
    workspace.start_sync()
    pages = []
    for text in ("The walrus sleeps.", "The heron waits.", "The fox runs."):
        canvas = PdfCanvas(300, 200)
        canvas.text(20, 60, text, 11)
        pages.append(canvas)
    try:
        with running(workspace, ServeOptions(access_log=False)) as url:
            assert upload(url, "zoo.pdf", write_pdf(pages))["state"] == "done"
            first = httpx.get(f"{url}/api/documents").json()["documents"][0]["first_page"]
            ids = [first.replace("-p0001", f"-p{n:04d}") for n in (1, 2, 3)]
            yield url, workspace, ids
    finally:
        workspace.close()


def _plant(workspace: Workspace, page_id: str, relative: str, data: bytes) -> None:
    """Write ``data`` inside the store and point the page's image path at it (a damaged or planted
    store)."""
    target = workspace.store_root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    with sqlite3.connect(workspace.store_root / DB_NAME) as conn:
        conn.execute("UPDATE pages SET image_path = ? WHERE id = ?", (relative, page_id))


def test_every_response_carries_nosniff_and_the_policy(served: tuple[str, Workspace, list[str]]) -> None:
    url, _, ids = served
    port = url.rsplit(":", 1)[1]
    responses = {
        "home": httpx.get(url),
        "document": httpx.get(f"{url}/documents/zoo.pdf", params={"page": 2}),
        "login": httpx.get(f"{url}/login"),
        "json": httpx.get(f"{url}/api/documents"),
        "health": httpx.get(f"{url}/health"),
        "script": httpx.get(f"{url}/static/app.js"),
        "image": httpx.get(f"{url}/pages/{ids[0]}/image"),
        "stream": httpx.post(f"{url}/api/index"),
        "404": httpx.get(f"{url}/nowhere"),
        "405": httpx.put(f"{url}/api/ask"),
        "415": httpx.post(f"{url}/api/upload", params={"name": "x.svg"}, content=SVG),
        "421": httpx.get(f"{url}/health", headers={"Host": f"evil.example:{port}"}),
        "chat": httpx.get(f"{url}/v1/models"),
    }
    for what, response in responses.items():
        assert response.headers["x-content-type-options"] == "nosniff", what
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY, what
        assert response.headers["x-frame-options"] == "DENY", what
    assert {"script-src 'self'", "object-src 'none'", "frame-ancestors 'none'", "base-uri 'none'"} <= set(
        CONTENT_SECURITY_POLICY.split("; ")
    )
    assert "unsafe" not in CONTENT_SECURITY_POLICY
    for what in ("home", "document", "login"):
        assert responses[what].status_code == 200, what
        assert INLINE_SCRIPT.findall(responses[what].text) == [], what  # the policy would block it
    for what in ("home", "document"):  # the arrow keys of a document's page are in the script file
        assert '<script src="/static/app.js"></script>' in responses[what].text, what


def test_a_server_error_carries_the_headers_too() -> None:
    async def broken(request: Request) -> Response:
        raise RuntimeError("a bug")

    app = SecurityHeaders(Starlette(routes=[Route("/", broken)]))
    with TestClient(app, raise_server_exceptions=False) as client:
        got = client.get("/")
    assert got.status_code == 500 and got.headers["x-content-type-options"] == "nosniff"
    assert got.headers["content-security-policy"] == CONTENT_SECURITY_POLICY


def _jpeg() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(out, format="JPEG")
    return out.getvalue()


def test_a_page_image_is_served_only_as_the_raster_its_bytes_are(
    served: tuple[str, Workspace, list[str]],
) -> None:
    url, workspace, ids = served
    png = httpx.get(f"{url}/pages/{ids[2]}/image")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    assert png.content.startswith(b"\x89PNG")
    planted = {
        "evil.svg": SVG,  # an image path naming an SVG inside the store
        "pages/evil.html": HTML,
        "pages/evil.png": HTML,  # a raster's name, HTML inside
    }
    for relative, data in planted.items():
        _plant(workspace, ids[0], relative, data)
        got = httpx.get(f"{url}/pages/{ids[0]}/image")
        assert got.status_code == 404, relative
        assert got.headers["content-type"] == "application/json", relative
        assert got.json() == {
            "error": f"the image of page {ids[0]!r} is not a PNG, JPEG or WebP file; ingest it again"
        }
    _plant(workspace, ids[1], "pages/scan.svg", _jpeg())  # a JPEG under an SVG's name is a JPEG
    jpeg = httpx.get(f"{url}/pages/{ids[1]}/image")
    assert jpeg.status_code == 200 and jpeg.headers["content-type"] == "image/jpeg"
    assert jpeg.headers["x-content-type-options"] == "nosniff"
