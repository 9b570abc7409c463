"""``evidra mcp``: a workspace's search, pages and answers as MCP tools (the official ``mcp`` SDK).

Tools, for agent hosts (Claude Desktop, IDEs, any MCP client), over stdio:

- ``search(query, k=5)``: the top pages, each with its citation label (document, page), page id
  and score, then each page's image itself (base64 PNG image content, at most ``IMAGE_SIDE``
  pixels a side and ``MAX_SEARCH_IMAGE_BYTES`` in all: a hit past the cap says
  ``image_attached: false``, and ``page`` gives it); no model needed;
- ``page(page_id)``: the page image (PNG) and its label, for the host's own model to read;
- ``ask(question, k=3)``: evidra's model answers over the top pages; the reply holds the answer,
  every cited step with its document, page and box (page pixels), and the pages read.

A question or query over ``ServeOptions.max_question_chars`` and a ``k`` outside 1..``max_k``
are refused with a one-line tool error, as ``evidra serve`` refuses them.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from evidra.app.citations import answer_json, citation_label, page_json
from evidra.app.http import ServeOptions, k_of, question_of
from evidra.core.errors import EvidraError, MissingDependencyError
from evidra.core.jsonvalue import JSON
from evidra.http.server_limits import HttpError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from evidra.app.workspace import Workspace
    from evidra.core.types import Page

IMAGE_SIDE = 1024  # pixels of the longest side of a search hit's page image
MAX_SEARCH_IMAGE_BYTES = 4 << 20  # PNG bytes of all the images of one search (the rest: none)
INSTRUCTIONS = (
    "Search and read the user's documents. `search` finds pages by text, `page` returns a page image, "
    "`ask` answers a question with evidence: every step cites a document, a page and a box."
)


P = ParamSpec("P")
R = TypeVar("R")


def _checked(fn: Callable[P, Awaitable[R]]) -> Callable[P, Awaitable[R]]:
    """Refusals of the app's limits as one-line tool errors (``ToolError``: an anticipated failure,
    which the host's model reads; any other exception is reported as a crash)."""
    import functools

    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await fn(*args, **kwargs)
        except (HttpError, EvidraError) as exc:
            raise ToolError(str(exc).splitlines()[0]) from None

    return wrapper


def _image_path(workspace: Workspace, page: Page) -> Path | None:
    try:
        return workspace.image_of(page).path
    except EvidraError:  # a page whose image is gone or not an image: its hit comes without one
        return None


def _hit_images(paths: list[Path | None]) -> list[bytes | None]:
    """Each page image as a PNG whose longest side is at most ``IMAGE_SIDE`` pixels, while all of
    them stay under ``MAX_SEARCH_IMAGE_BYTES`` (None for an image past the cap)."""
    import io

    from PIL import Image as PILImage

    from evidra.core.imagefiles import decode

    out: list[bytes | None] = []
    total = 0
    for path in paths:
        if path is None:
            out.append(None)
            continue
        page = decode(path, f"page image {path.name}")
        page.thumbnail((IMAGE_SIDE, IMAGE_SIDE), PILImage.Resampling.LANCZOS)
        buf = io.BytesIO()
        page.save(buf, format="PNG")
        png = buf.getvalue()
        fits = total + len(png) <= MAX_SEARCH_IMAGE_BYTES
        total += len(png) if fits else 0
        out.append(png if fits else None)
    return out


def build_mcp(workspace: Workspace, options: ServeOptions | None = None) -> MCPServer:
    """The MCP server over a started ``workspace``."""
    try:
        from mcp.server.mcpserver import Image, MCPServer
    except ImportError as exc:
        raise MissingDependencyError(
            "evidra mcp needs the MCP SDK: pip install 'evidra[app]' (or mcp)"
        ) from exc
    options = options or ServeOptions()
    server: MCPServer = MCPServer("evidra", instructions=INSTRUCTIONS)

    @server.tool(structured_output=False)
    @_checked
    async def search(query: str, k: int = 5) -> list[object]:
        """Pages of the user's documents that match ``query`` (BM25 or the visual index), best
        first: a JSON list of hits, then each hit's page image (PNG) after its label."""
        found = await workspace.search(question_of(query, options), k_of(k, 5, options))
        images = await asyncio.to_thread(_hit_images, [_image_path(workspace, page) for _, page in found])
        hits: list[JSON] = []
        content: list[object] = []
        for (hit, page), png in zip(found, images, strict=True):
            record = page_json(page, hit.score)
            del record["image"]  # a URL of this server, which an agent host cannot fetch
            record["image_attached"] = png is not None
            hits.append(record)
            if png is not None:
                content += [citation_label(page), Image(data=png, format="png")]
        return [json.dumps({"query": query, "hits": hits}, ensure_ascii=False), *content]

    @server.tool(structured_output=False)
    @_checked
    async def page(page_id: str) -> list[object]:
        """The image of one page (from `search` or `ask`) with its citation label."""
        found = await workspace.page(page_id)
        image = await workspace.image_file(page_id)  # a PNG, JPEG or WebP by its first bytes
        data = image.path.read_bytes()
        label = f"{citation_label(found)} ({found.width}x{found.height} px)"
        return [label, Image(data=data, format=image.media_type.removeprefix("image/"))]

    @server.tool()
    @_checked
    async def ask(question: str, k: int = 3) -> dict[str, Any]:  # the SDK reads it: the output schema
        """Answer ``question`` from the top ``k`` pages; every step cites a document, page and box."""
        answer = await workspace.ask(question_of(question, options), k_of(k, options.k, options))
        return answer_json(answer)

    return server
