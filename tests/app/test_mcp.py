"""``evidra mcp``'s tools through the MCP SDK's own client, in process: search, page, ask."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

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
    return {"tools": tools, "hit": hit, "page": page, "answer": answer, "refused": refused}


def test_search_page_and_ask_tools(tmp_path: Path, corpus: SynthCorpus, tiny_dirs: dict[str, Path]) -> None:
    workspace = _filled(tmp_path, corpus, str(tiny_dirs["qwen2_5_vl"]))
    try:
        got = asyncio.run(_session(workspace))
    finally:
        workspace.close()
    assert got["tools"] == ["ask", "page", "search"]
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
