"""``OpenAIJudge``: the judge over any OpenAI-compatible ``POST {base_url}/chat/completions``
endpoint (vLLM, SGLang, hosted), with its reply caches and retry policy.

Async with bounded concurrency, timeouts, bounded exponential-backoff retries and a cache
keyed by ``(model, prompt)``. The released code retried forever (VRAG-RL) or scored failures
as 0 (Lang2Act); neither is reproduced: an item that stays unjudged is a ``Verdict`` of None.
Prompts and the reply parser are in ``evidra.rewards.judge_protocol``.

``OpenAIJudge`` needs ``httpx`` (optional extra ``judge``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from evidra.errors import InvalidInputError
from evidra.rewards.judge_protocol import JudgeItem, PromptStyle, Verdict, build_messages, parse_verdicts

logger = logging.getLogger(__name__)


class JudgeCache(Protocol):
    def get(self, key: str) -> str | None: ...
    def put(self, key: str, value: str) -> None: ...


class MemoryCache:
    """In-process reply cache (thread-safe)."""

    def __init__(self) -> None:
        self._data: dict[str, str] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            return self._data.get(key)

    def put(self, key: str, value: str) -> None:
        with self._lock:
            self._data[key] = value

    def __len__(self) -> int:
        return len(self._data)


class DiskCache:
    """Reply cache in one SQLite file, so a resumed run does not pay for the same judgements."""

    def __init__(self, path: str | Path) -> None:
        self._conn = sqlite3.connect(str(path), check_same_thread=False)
        self._conn.execute("CREATE TABLE IF NOT EXISTS judge (key TEXT PRIMARY KEY, reply TEXT)")
        self._lock = threading.Lock()

    def get(self, key: str) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT reply FROM judge WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def put(self, key: str, value: str) -> None:
        with self._lock, self._conn:
            self._conn.execute("INSERT OR REPLACE INTO judge VALUES (?, ?)", (key, value))

    def close(self) -> None:
        self._conn.close()


def cache_key(model: str, messages: Sequence[Mapping[str, str]]) -> str:
    """Stable key of a request: the model and the exact prompt messages."""
    blob = json.dumps([model, list(messages)], sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class HttpJudgeConfig:
    """Endpoint and retry policy of an ``OpenAIJudge``.

    ``batch_size``: items per request for the Lang2Act prompt (10 in toolrl, 5 in actionrl);
    the VRAG-RL prompt always sends one. Retries are bounded: ``max_retries`` extra attempts,
    retry ``r`` (1-based) after ``min(max_backoff_s, backoff_s * 2**(r - 1))`` seconds.
    """

    base_url: str
    model: str
    style: PromptStyle = "lang2act"
    api_key: str | None = field(default=None, repr=False)  # never logged
    batch_size: int = 10
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    temperature: float = 0.0
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1 or self.max_retries < 0:
            raise InvalidInputError(
                f"judge batch_size and concurrency must be >= 1 and max_retries >= 0, got "
                f"{self.batch_size}, {self.concurrency}, {self.max_retries}"
            )
        if self.style not in ("vragrl", "lang2act"):
            raise InvalidInputError(f"unknown judge prompt style {self.style!r}; use 'vragrl' or 'lang2act'")


@dataclass
class JudgeStats:
    """Counters of one judge's lifetime (for logging; not part of any result)."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    judged: int = 0
    unscored: int = 0


class _Retryable(Exception):
    """A failed attempt worth retrying (timeout, connection error, 5xx/429, bad reply)."""


class _Fatal(Exception):
    """A failed attempt that retrying cannot fix (4xx other than 429)."""


class OpenAIJudge:
    """Judge over an OpenAI-compatible ``/chat/completions`` endpoint.

    ``judge`` / ``judge_batch`` are synchronous; ``ajudge`` is the async core: requests run
    concurrently under an ``asyncio.Semaphore(concurrency)``.
    """

    def __init__(self, config: HttpJudgeConfig, cache: JudgeCache | None = None) -> None:
        self.config = config  # httpx is a core dependency, imported where requests are made
        self.cache: JudgeCache = cache if cache is not None else MemoryCache()
        self.stats = JudgeStats()

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self.judge_batch(items)

    def judge_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """Blocking wrapper around ``ajudge``; safe to call from inside a running event loop."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(self.ajudge(items))
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, self.ajudge(items)).result()

    async def ajudge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        import httpx

        size = 1 if self.config.style == "vragrl" else self.config.batch_size
        chunks = [list(items[i : i + size]) for i in range(0, len(items), size)]
        sem = asyncio.Semaphore(self.config.concurrency)
        headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
        timeout = httpx.Timeout(self.config.timeout_s)
        async with httpx.AsyncClient(timeout=timeout, headers=headers) as client:
            results = await asyncio.gather(*(self._chunk(client, sem, chunk) for chunk in chunks))
        verdicts = [v for chunk_verdicts in results for v in chunk_verdicts]
        self.stats.judged += sum(v.scored for v in verdicts)
        self.stats.unscored += sum(not v.scored for v in verdicts)
        if any(not v.scored for v in verdicts):
            logger.warning(
                "judge left %d of %d items unscored", sum(not v.scored for v in verdicts), len(verdicts)
            )
        return verdicts

    async def _chunk(self, client: Any, sem: asyncio.Semaphore, chunk: list[JudgeItem]) -> list[Verdict]:
        messages = build_messages(self.config.style, chunk)
        key = cache_key(self.config.model, messages)
        cached = self.cache.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return parse_verdicts(cached, len(chunk))
        verdicts = [Verdict(None, "judge not called")] * len(chunk)
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                self.stats.retries += 1
                await asyncio.sleep(
                    min(self.config.max_backoff_s, self.config.backoff_s * 2 ** (attempt - 1))
                )
            try:
                async with sem:
                    reply = await self._post(client, messages, len(chunk))
            except _Retryable as exc:
                verdicts = [Verdict(None, str(exc))] * len(chunk)
                logger.info("judge attempt %d failed: %s", attempt + 1, exc)
                continue
            except _Fatal as exc:
                return [Verdict(None, str(exc))] * len(chunk)
            verdicts = parse_verdicts(reply, len(chunk))
            if all(v.scored for v in verdicts):
                self.cache.put(key, reply)
                return verdicts
            logger.info("judge attempt %d: unparseable reply %r", attempt + 1, reply[:80])
        return verdicts

    async def _post(self, client: Any, messages: list[dict[str, str]], n: int) -> str:
        import httpx

        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens or max(64, 20 * n),
        }
        url = self.config.base_url.rstrip("/") + "/chat/completions"
        self.stats.requests += 1
        try:  # timeout_s bounds the whole attempt, not each read (a trickling server cannot hold it)
            response = await asyncio.wait_for(client.post(url, json=body), timeout=self.config.timeout_s)
        except (httpx.HTTPError, asyncio.TimeoutError) as exc:  # timeouts, refused connections, protocol
            raise _Retryable(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code == 429 or response.status_code >= 500:
            raise _Retryable(f"HTTP {response.status_code} from {url}")
        if response.status_code >= 400:
            raise _Fatal(f"HTTP {response.status_code} from {url}; check the model name and api key")
        try:
            content = response.json()["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable(f"reply is not an OpenAI chat completion: {exc!r}") from exc
        return content if isinstance(content, str) else ""
