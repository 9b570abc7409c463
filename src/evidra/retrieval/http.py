"""What a /search request may ask for, and the checks of its JSON body.

Every refusal is an ``HttpError`` with a 4xx status and a one-line message that never repeats
Python's exception text: a body that is not JSON, is nested too deeply or holds a number too
long to convert (400), and a /search body over the caps of ``SearchLimits`` (413) or otherwise
malformed (400). The HTTP framing before it (request line, headers, Content-Length, chunked
bodies) is uvicorn's h11 parser's job, and the body size cap is starlette's; see
``evidra.retrieval.app``. This module needs neither, so the clients import it cheaply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from evidra.corpus.metadata import PageMeta, parse_where
from evidra.httpserve import HttpError

MAX_BODY = 1 << 20  # bytes of one request body, Content-Length or chunked (413 above)
MAX_HEAD = 16 << 10  # bytes of the request line and headers together (400 above, from h11)
MAX_HEADERS = 64  # header lines of one request (431 above)


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
    where: dict[str, list[str]] = field(default_factory=dict)  # metadata filter: key -> accepted values


MAX_WHERE_KEYS, MAX_WHERE_VALUES, MAX_WHERE_CHARS = 32, 64, 1024


def _where(data: object) -> dict[str, list[str]]:
    """``{"file": "report.pdf", "year": ["2023", "2024"]}`` checked: short text keys and values."""
    if data is None:
        return {}
    bad = HttpError(
        400,
        f'"where" must be an object of at most {MAX_WHERE_KEYS} keys, each a text or a list of at most '
        f"{MAX_WHERE_VALUES} texts of at most {MAX_WHERE_CHARS} characters",
    )
    if not isinstance(data, dict) or len(data) > MAX_WHERE_KEYS:
        raise bad
    out = {}
    for key, value in data.items():
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or len(values) > MAX_WHERE_VALUES:
            raise bad
        if not all(isinstance(v, str) and len(v) <= MAX_WHERE_CHARS for v in [key, *values]):
            raise bad
        out[key] = values
    return out


def filtered(request: SearchRequest, pages: Mapping[str, PageMeta] | None) -> SearchRequest:
    """``request`` with the pages its ``where`` rules out added to every query's exclusions."""
    if not request.where:
        return request
    if pages is None:
        raise HttpError(
            400,
            '"where" needs page metadata: start the service over an index built with --store, '
            "or pass --store",
        )
    where = parse_where(request.where)
    out = [pid for pid, meta in pages.items() if not where.matches(meta)]
    return replace(request, exclude=[[*e, *out] for e in request.exclude])


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
    """Validate a /search body; raises ``HttpError`` (400, or 413 over a cap) naming the bad field.

    >>> parse_search(b'{"queries": ["red fox"], "k": 3}', SearchLimits())
    SearchRequest(queries=['red fox'], k=3, exclude=[[]], where={})
    >>> parse_search(b'{"queries": ["a", "b"]}', SearchLimits(max_queries=1))
    Traceback (most recent call last):
    evidra.httpserve.HttpError: 2 queries in one request, over the cap of 1; split it
    """
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
    return SearchRequest(queries, k, exclude, _where(data.get("where")))
