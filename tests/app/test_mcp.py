"""``evidra mcp``'s tools through the MCP SDK's own client, in process: search, page, ask."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from evidra.app.mcp_server import IMAGE_SIDE
from evidra.app.workspace import ModelSpec, Workspace
from evidra.data.synth.documents import SynthCorpus

pytest.importorskip("mcp", reason="the MCP SDK is in the app extra")


def _filled(tmp_path: Path, corpus: SynthCorpus, model: str | None) -> Workspace:
    from evidra.corpus import ingest

    ingest(corpus.docs_dir, tmp_path / "store")
    workspace = Workspace(tmp_path / "store", None, ModelSpec(model, max_new_tokens=16) if model else None)
    workspace.start_sync()
    asyncio.run(workspace.index_new())
    return workspace


async def _session(workspace: Workspace) -> dict[str, Any]:
    from mcp import Client

    from evidra.app.mcp_server import build_mcp

    question = "Which city was founded in 1894?"
    async with Client(build_mcp(workspace)) as client:
        tools = sorted(t.name for t in (await client.list_tools()).tools)
        found = await client.call_tool("search", {"query": "Vilnius", "k": 2})
        hit = json.loads(found.content[0].text)["hits"][0]
        page = await client.call_tool("page", {"page_id": hit["page_id"]})
        answer = await client.call_tool("ask", {"question": question, "k": 2})
        refused = await client.call_tool("search", {"query": "q", "k": 500})
    return {"tools": tools, "hit": hit, "found": found, "page": page, "answer": answer, "refused": refused}


def test_search_page_and_ask_tools(tmp_path: Path, corpus: SynthCorpus, tiny_dirs: dict[str, Path]) -> None:
    workspace = _filled(tmp_path, corpus, str(tiny_dirs["qwen2_5_vl"]))
    try:
        got = asyncio.run(_session(workspace))
    finally:
        workspace.close()
    assert got["tools"] == ["ask", "page", "search"]
    label, shown = got["found"].content[1:3]  # the first hit's label, then its page as PNG content
    assert label.text == got["hit"]["label"] and shown.type == "image" and shown.mime_type == "image/png"
    png = base64.b64decode(shown.data)
    assert png.startswith(b"\x89PNG") and max(Image.open(io.BytesIO(png)).size) <= IMAGE_SIDE
    assert got["hit"]["image_attached"] is True and "image" not in got["hit"]  # no URL to fetch
    assert got["hit"]["label"].endswith(" p. 2") and got["hit"]["document"] == "doc_000.pdf"
    text, image = got["page"].content
    assert (
        text.text.startswith("doc_000.pdf p. 2 (")
        and image.type == "image"
        and image.mime_type == "image/png"
    )
    answer = json.loads(got["answer"].content[0].text)
    assert answer["question"] == "Which city was founded in 1894?" and len(answer["pages"]) == 2
    assert got["refused"].is_error and "k must be in 1..20" in got["refused"].content[0].text
