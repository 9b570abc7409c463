"""The HTTP/1.1 side of the search service: reading one request, validating a /search body, answering.

Everything a client sends is bounded and checked here, and every refusal is an ``HttpError``
with a 4xx status and a one-line message that never repeats Python's exception text: a request
line or header over ``MAX_LINE`` bytes (414/431), more than ``MAX_HEADERS`` headers (431), a
Content-Length that is not a plain non-negative integer (400) or over ``MAX_BODY`` (413), a body
that is not JSON, is nested too deeply or holds a number too long to convert (400), and a
/search body over the caps of ``SearchLimits`` (413) or otherwise malformed (400).
"""

from __future__ import annotations

import asyncio
import itertools
import json
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

MAX_BODY = 1 << 20
MAX_HEADERS = 64
MAX_LINE = 8 << 10  # bytes of a request line or one header line


class HttpError(Exception):
    """An error answered with ``status`` and a JSON ``{"error": message}`` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


@dataclass(frozen=True)
class SearchLimits:
    """What one /search request may ask for."""

    max_k: int = 100
    max_queries: int = 256  # per request; a larger one would hold the worker for everyone else
    max_query_chars: int = 4096


@dataclass(frozen=True)
class SearchRequest:
    queries: list[str]
    k: int
    exclude: list[list[str]]


async def _line(reader: asyncio.StreamReader, what: str, status: int) -> bytes:
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.IncompleteReadError as exc:
        return exc.partial  # the client closed the connection mid-line
    except asyncio.LimitOverrunError:
        raise HttpError(status, f"{what} is longer than {MAX_LINE} bytes") from None
    if len(line) > MAX_LINE:
        raise HttpError(status, f"{what} is longer than {MAX_LINE} bytes")
    return line


async def read_request(reader: asyncio.StreamReader) -> Request | None:
    """The next request on ``reader``; ``None`` when the client closed the connection.

    ``reader`` must be created with ``limit`` at least ``MAX_LINE`` (``asyncio.start_server``'s
    default of 64 KiB is).
    """
    line = await _line(reader, "the request line", 414)
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise HttpError(400, f"malformed request line {line[:80]!r}")
    method, path, version = parts
    headers: dict[str, str] = {}
    for count in itertools.count():
        raw = await _line(reader, "a header line", 431)
        if raw in (b"\r\n", b"\n", b""):
            break
        if count >= MAX_HEADERS:
            raise HttpError(431, f"more than {MAX_HEADERS} headers")
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise HttpError(411, "chunked bodies are not supported; send Content-Length")
    text = headers.get("content-length", "0")
    if not (text.isascii() and text.isdigit()) or len(text) > 12:
        raise HttpError(400, "Content-Length must be a non-negative integer")
    length = int(text)
    if length > MAX_BODY:
        raise HttpError(413, f"body of {length} bytes exceeds the limit of {MAX_BODY}")
    body = await reader.readexactly(length) if length else b""
    connection = headers.get("connection", "").lower()
    keep = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    return Request(method, path.split("?", 1)[0], headers, body, keep)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body or b"null")
    except json.JSONDecodeError as exc:
        raise HttpError(400, f"body is not valid JSON ({exc.msg} at character {exc.pos})") from None
    except UnicodeDecodeError:
        raise HttpError(400, "body is not valid JSON (not UTF-8 text)") from None
    except RecursionError:
        raise HttpError(400, "body is not valid JSON for /search (nested too deeply)") from None
    except ValueError:  # e.g. an integer of thousands of digits
        raise HttpError(400, "body is not valid JSON for /search (a number is too long)") from None


def _is_text(q: object) -> bool:
    if not isinstance(q, str) or not q.strip():
        return False
    try:
        q.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate such as "\ud800"
        return False
    return True


def parse_search(body: bytes, limits: SearchLimits) -> SearchRequest:
    """Validate a /search body; raises ``HttpError`` (400, or 413 over a cap) naming the bad field."""
    data = _json(body)
    if not isinstance(data, dict):
        raise HttpError(400, 'body must be a JSON object like {"queries": ["..."], "k": 5}')
    queries = data.get("queries", [data["query"]] if "query" in data else None)
    if not isinstance(queries, list) or not queries:
        raise HttpError(400, '"queries" must be a non-empty list of non-empty strings')
    if len(queries) > limits.max_queries:
        raise HttpError(
            413, f"{len(queries)} queries in one request, over the cap of {limits.max_queries}; split it"
        )
    if not all(_is_text(q) for q in queries):
        raise HttpError(400, '"queries" must be a non-empty list of non-empty strings of valid Unicode')
    longest = max(len(q) for q in queries)
    if longest > limits.max_query_chars:
        raise HttpError(
            413, f"a query of {longest} characters, over the cap of {limits.max_query_chars}; shorten it"
        )
    k = data.get("k", 10)
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= limits.max_k:
        shown = repr(k) if len(repr(k)) <= 20 else f"{repr(k)[:20]}..."
        raise HttpError(400, f'"k" must be an integer in 1..{limits.max_k}, got {shown}')
    exclude = data.get("exclude") or [[] for _ in queries]
    if (
        not isinstance(exclude, list)
        or len(exclude) != len(queries)
        or not all(isinstance(e, list) and all(isinstance(p, str) for p in e) for e in exclude)
    ):
        raise HttpError(400, '"exclude" must be a list with one list of page ids per query')
    return SearchRequest(queries, k, exclude)


def response(status: int, payload: Any, *, keep_alive: bool, extra: str = "") -> bytes:
    """A complete HTTP/1.1 response with a JSON body; ``extra`` holds further header lines."""
    body = json.dumps(payload).encode()
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: {'keep-alive' if keep_alive else 'close'}\r\n"
        f"{extra}\r\n"
    )
    return head.encode() + body
