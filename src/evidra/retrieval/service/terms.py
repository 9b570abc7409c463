"""The search service's terms, light enough for its clients: what it is configured with
(``ServiceOptions``), what a /search request may ask for, and the checks of its JSON body.

Every refusal is an ``HttpError`` with a 4xx status and a one-line message that never repeats
Python's exception text: a body that is not JSON, is nested too deeply or holds a number too
long to convert (400), and a /search body over the caps of ``SearchLimits`` (413) or otherwise
malformed (400). The HTTP framing before it (request line, headers, Content-Length, chunked
bodies) is uvicorn's h11 parser's job, and the body size cap is starlette's; see
``evidra.retrieval.service.app``. This module needs neither, so the clients import it cheaply; the
service (``evidra.retrieval.service.server``) and its app both build on it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from evidra.core.errors import InvalidInputError
from evidra.corpus.metadata import PageMeta, parse_where
from evidra.http.server_limits import HttpError

MAX_BODY = 1 << 20  # bytes of one request body, Content-Length or chunked (413 above)
MAX_HEAD = 16 << 10  # bytes of the request line and headers together (400 above, from h11)
MAX_HEADERS = 64  # header lines of one request (431 above)
API_KEY_ENV = "EVIDRA_INDEX_API_KEY"  # read by the CLI and the clients, never by SearchService


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


@dataclass(frozen=True)
class ServiceOptions:
    """How a ``SearchService`` batches its searches and what it accepts over HTTP."""

    max_batch: int = 32  # queries per retriever call
    max_wait_ms: float = 5.0  # how long the first request of a batch waits for company
    max_k: int = 100
    idle_timeout_s: float = 30.0  # keep-alive connections idle this long are closed; also the body's deadline
    max_queries: int = 256  # queries per request (413 above)
    max_query_chars: int = 4096  # characters per query (413 above)
    max_body: int = MAX_BODY  # bytes per request body, declared or chunked (413 above)
    api_key: str | None = field(default=None, repr=False)  # required as a Bearer token when set
    access_log: bool = True  # one INFO line per request on the evidra.retrieval.access logger
    max_connections: int = 512  # open connections; at the cap the longest idle one is closed

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_ms < 0 or self.max_k < 1:
            raise InvalidInputError("ServiceOptions needs max_batch >= 1, max_wait_ms >= 0, max_k >= 1")
        if min(self.max_queries, self.max_query_chars, self.max_body, self.max_connections) < 1:
            raise InvalidInputError(
                "ServiceOptions needs max_queries, max_query_chars, max_body and max_connections >= 1"
            )
        if self.idle_timeout_s <= 0:
            raise InvalidInputError(f"ServiceOptions needs idle_timeout_s > 0, got {self.idle_timeout_s}")
        if self.api_key is not None and not self.api_key.strip():
            raise InvalidInputError(f"the API key is empty; set {API_KEY_ENV} to a secret or leave it unset")

    @property
    def limits(self) -> SearchLimits:
        return SearchLimits(self.max_k, self.max_queries, self.max_query_chars)


class ClientGone(Exception):
    """The client closed its connection before its answer was ready."""


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


def _json(body: bytes) -> object:
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
    evidra.http.server_limits.HttpError: 2 queries in one request, over the cap of 1; split it
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
