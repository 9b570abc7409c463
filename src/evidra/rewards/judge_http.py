"""``OpenAIJudge``: the judge over any OpenAI-compatible ``POST {base_url}/chat/completions``
endpoint (vLLM, SGLang, hosted), with its reply caches.

Requests go through ``evidra.openai.client`` (the key from ``api_key_env``, bounded backoff with
jitter on 429/5xx/connection errors/timeouts honouring ``Retry-After``, a wall-clock timeout per
attempt), concurrently under a semaphore, with a cache keyed by ``(model, prompt)``. A reply
that is no chat completion or holds no parseable verdicts is asked again, within the same
``max_retries``. The released code retried forever (VRAG-RL) or scored failures as 0
(Lang2Act); neither is reproduced: an item that stays unjudged is a ``Verdict`` of None.
Prompts are in ``evidra.rewards.judge_prompts``, the reply parser in ``evidra.rewards.judge_protocol``.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.openai.client import (
    DEFAULT_API_KEY_ENV,
    AsyncChatClient,
    ChatClientError,
    ClientConfig,
    MalformedResponseError,
    RetryPolicy,
    retry_delay,
    run_sync,
)
from evidra.rewards.judge_prompts import JUDGE_PROMPTS, build_messages
from evidra.rewards.judge_protocol import JudgeItem, Verdict, parse_verdicts
from evidra.safeio.keys import KeyPolicy

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

    ``batch_size``: items per request for a batching prompt (Lang2Act: 10 in toolrl, 5 in
    actionrl); a one-item prompt (VRAG-RL, CAVE) always sends one. Retries are bounded: at most
    ``1 + max_retries`` requests per batch, whatever failed (HTTP 429/5xx, connection, timeout, a malformed or
    unparseable reply); retry ``r`` (1-based) waits up to ``min(max_backoff_s, backoff_s *
    2**(r - 1))`` seconds (or the server's ``Retry-After``, up to ``max_backoff_s``), and the
    retries of one request wait at most ``max_wait_s`` in all. ``timeout_s`` bounds each
    attempt as a whole. The key is ``api_key`` when given, else ``$api_key_env`` where
    ``key_policy`` lets it go to ``base_url`` (``evidra.safeio.keys``).
    """

    base_url: str
    model: str
    style: str = "lang2act"  # a JUDGE_PROMPTS name: vragrl | lang2act | cave
    api_key: str | None = field(default=None, repr=False)  # never logged
    batch_size: int = 10
    concurrency: int = 8
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0
    temperature: float = 0.0
    max_tokens: int | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    max_wait_s: float = 120.0
    key_policy: KeyPolicy = field(default_factory=KeyPolicy)  # who named base_url

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.concurrency < 1 or self.max_retries < 0:
            raise InvalidInputError(
                f"judge batch_size and concurrency must be >= 1 and max_retries >= 0, got "
                f"{self.batch_size}, {self.concurrency}, {self.max_retries}"
            )
        try:
            JUDGE_PROMPTS.get(self.style)
        except RegistryError as exc:
            raise InvalidInputError(str(exc)) from None

    def client_config(self) -> ClientConfig:
        retry = RetryPolicy(
            max_attempts=self.max_retries + 1,
            backoff_s=self.backoff_s,
            max_backoff_s=self.max_backoff_s,
            max_wait_s=self.max_wait_s,
        )
        return ClientConfig(
            self.base_url,
            self.model,
            api_key_env=self.api_key_env,
            api_key=self.api_key,
            timeout_s=self.timeout_s,
            retry=retry,
            key_policy=self.key_policy,
        )


@dataclass
class JudgeStats:
    """Counters of one judge's lifetime (for logging; not part of any result)."""

    requests: int = 0
    retries: int = 0
    cache_hits: int = 0
    judged: int = 0
    unscored: int = 0


class OpenAIJudge:
    """Judge over an OpenAI-compatible ``/chat/completions`` endpoint.

    ``judge`` / ``judge_batch`` are synchronous; ``ajudge`` is the async core: requests run
    concurrently under an ``asyncio.Semaphore(concurrency)``.
    """

    def __init__(self, config: HttpJudgeConfig, cache: JudgeCache | None = None) -> None:
        self.config = config
        self.client_config = config.client_config()
        self.cache: JudgeCache = cache if cache is not None else MemoryCache()
        self.stats = JudgeStats()
        self._rng = random.Random()

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return self.judge_batch(items)

    def judge_batch(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        """Blocking wrapper around ``ajudge``; safe to call from inside a running event loop."""
        return run_sync(self.ajudge(items))

    async def ajudge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        size = JUDGE_PROMPTS.get(self.config.style).per_request or self.config.batch_size
        chunks = [list(items[i : i + size]) for i in range(0, len(items), size)]
        sem = asyncio.Semaphore(self.config.concurrency)
        async with AsyncChatClient(self.client_config) as client:
            results = await asyncio.gather(*(self._chunk(client, sem, chunk) for chunk in chunks))
        verdicts = [v for chunk_verdicts in results for v in chunk_verdicts]
        self.stats.judged += sum(v.scored for v in verdicts)
        self.stats.unscored += sum(not v.scored for v in verdicts)
        if any(not v.scored for v in verdicts):
            logger.warning(
                "judge left %d of %d items unscored", sum(not v.scored for v in verdicts), len(verdicts)
            )
        return verdicts

    async def _chunk(
        self, client: AsyncChatClient, sem: asyncio.Semaphore, chunk: list[JudgeItem]
    ) -> list[Verdict]:
        messages = build_messages(self.config.style, chunk)
        key = cache_key(self.config.model, messages)
        cached = self.cache.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return parse_verdicts(cached, len(chunk))
        budget = self.config.max_retries + 1  # requests for this chunk, whatever fails
        used = 0
        verdicts = [Verdict(None, "judge not called")] * len(chunk)
        while used < budget:
            if used:  # the last reply was malformed or unparseable: ask again after a backoff
                await asyncio.sleep(retry_delay(self.client_config.retry, used, None, self._rng.random()))
            try:
                async with sem:
                    result = await client.chat(
                        messages,
                        temperature=self.config.temperature,
                        max_tokens=self.config.max_tokens or max(64, 20 * len(chunk)),
                        max_attempts=budget - used,
                    )
            except MalformedResponseError as exc:
                used += exc.attempts
                verdicts = [Verdict(None, str(exc))] * len(chunk)
                continue
            except ChatClientError as exc:  # refused (4xx), or unavailable through every retry
                used += exc.attempts
                verdicts = [Verdict(None, str(exc))] * len(chunk)
                break
            except Exception as exc:  # a judge failure leaves items unscored; it never ends a run
                logger.warning("judge request failed unexpectedly", exc_info=True)
                used += 1
                verdicts = [Verdict(None, f"judge failed: {type(exc).__name__}")] * len(chunk)
                break
            used += result.attempts
            verdicts = parse_verdicts(result.text, len(chunk))
            if all(v.scored for v in verdicts):
                self.cache.put(key, result.text)
                break
            logger.info("judge request %d: unparseable reply %r", used, result.text[:80])
        self.stats.requests += used
        self.stats.retries += used - 1
        return verdicts
