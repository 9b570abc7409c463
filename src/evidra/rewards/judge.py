"""LLM-as-judge answer scoring (VRAG-RL Eq. 11, Lang2Act Eq. 2 / Eq. 14) behind one protocol.

A judge maps ``JudgeItem``s (query, reference, generated answer) to ``Verdict``s. A verdict is
True, False or None: None means *unscored* (endpoint unreachable, reply unparseable, wrong
number of verdicts in a batch) and carries the reason. Reward wrappers turn None into
``RewardResult.unscored``; nothing here guesses a 0 or a 1.

Backends:

* ``RuleJudge``: normalized exact / containment match, offline and deterministic.
* ``OpenAIJudge``: any OpenAI-compatible ``POST {base_url}/chat/completions`` endpoint
  (vLLM, SGLang, hosted), async with bounded concurrency, timeouts, bounded exponential-backoff
  retries and a cache keyed by ``(model, prompt)``. The released code retried forever
  (VRAG-RL) or scored failures as 0 (Lang2Act); neither is reproduced.

Prompts: VRAG-RL sends one item as a single user message (``VRAGRL_JUDGE_TEMPLATE``);
Lang2Act sends batches as system prompt + one user message (``lang2act_user_message``).
The verbatim texts come from the conformance README (released rm.py / toolrl.py). The
released, lenient reply parsers are kept for replay next to their rewards:
``vragrl.parse_judge_response_upstream`` and ``lang2act.parse_judge_batch_upstream``.

``OpenAIJudge`` needs ``httpx`` (optional extra ``judge``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import re
import sqlite3
import string
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from evidra.errors import InvalidInputError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class JudgeItem:
    """One answer to judge. ``query``/``reference`` may be None to reproduce upstream payloads."""

    query: str | None
    reference: str | None
    generated: str


@dataclass(frozen=True)
class Verdict:
    """True/False when judged; None (unscored) with ``error`` saying why."""

    value: bool | None
    error: str | None = None

    @property
    def scored(self) -> bool:
        return self.value is not None

    def as_score(self) -> float | None:
        """1.0 / 0.0 for a judged item, None for an unscored one."""
        return None if self.value is None else float(self.value)


class Judge(Protocol):
    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]: ...


# --- prompts (verbatim from the released code, see conformance/README.md) -------------------

VRAGRL_JUDGE_TEMPLATE = """You are an expert evaluation system for a question answering chatbot.

You are given the following information:
- the query
- a generated answer
- a reference answer

Your task is to evaluate the correctness of the generated answer.

## Query
{query}

## Reference Answer
{reference_answer}

## Generated Answer
{generated_answer}

Your response should be formatted as following:
<judge>True or False</judge>

If the generated answer is correct, please set "judge" to True. Otherwise, please set "judge" to False.

Please note that the generated answer may contain additional information beyond the reference answer."""

LANG2ACT_JUDGE_SYSTEM_PROMPT = """You are an automated evaluation system. Your ONLY task is to compare a 'Generated Answer' to a 'Reference Answer' and determine if they are equivalent.
Follow these rules STRICTLY:
1.  For EACH item you evaluate, you MUST output EXACTLY ONE `<judge>` tag.
2.  Inside the tag, write 'True' if the generated answer is correct or equivalent to the reference.
3.  Inside the tag, write 'False' if the generated answer is incorrect, incomplete, or different from the reference.
4.  Your entire response MUST consist ONLY of a series of `<judge>` tags, one for each item.
5.  ABSOLUTELY DO NOT provide any text, explanation, reasoning, markdown, or any characters outside of the `<judge>True</judge>` or `<judge>False</judge>` tags.
Example for 2 items:
<judge>True</judge>
<judge>False</judge>
"""  # noqa: E501

PromptStyle = Literal["vragrl", "lang2act"]

_PLACEHOLDER = re.compile(r"\{(query|reference_answer|generated_answer)\}")


def vragrl_judge_prompt(item: JudgeItem) -> str:
    """The VRAG-RL judge prompt for one item (sent as the only, user, message).

    Substitution is single-pass, so an answer containing ``{query}`` is not re-expanded
    (the released code chains ``str.replace``).
    """
    values = {"query": item.query, "reference_answer": item.reference, "generated_answer": item.generated}
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), VRAGRL_JUDGE_TEMPLATE)


def lang2act_user_message(items: Sequence[Mapping[str, object] | JudgeItem]) -> str:
    """Lang2Act's batched judge user message (toolrl.py ``evaluate_chunk_worker``).

    Dict items reproduce the upstream payloads: a missing key prints ``N/A``, a None value
    prints ``None``.

    >>> print(lang2act_user_message([JudgeItem("Q?", "A", "B")]))
    Evaluate the following items and output one <judge> tag per item.
    <BLANKLINE>
    --- ITEM 1 ---
    ## Query
    Q?
    <BLANKLINE>
    ## Reference Answer
    A
    <BLANKLINE>
    ## Generated Answer
    B
    """
    parts = ["Evaluate the following items and output one <judge> tag per item.\n"]
    for j, item in enumerate(items, start=1):
        if isinstance(item, JudgeItem):
            fields: Mapping[str, object] = {
                "query": item.query,
                "reference_answer": item.reference,
                "generated_answer": item.generated,
            }
        else:
            fields = item
        parts.append(
            f"\n--- ITEM {j} ---\n"
            f"## Query\n{fields.get('query', 'N/A')}\n\n"
            f"## Reference Answer\n{fields.get('reference_answer', 'N/A')}\n\n"
            f"## Generated Answer\n{fields.get('generated_answer', 'N/A')}"
        )
    return "".join(parts)


def build_messages(style: PromptStyle, items: Sequence[JudgeItem]) -> list[dict[str, str]]:
    """OpenAI chat messages for one judge request."""
    if style == "vragrl":
        if len(items) != 1:
            raise InvalidInputError(f"the VRAG-RL judge prompt takes one item per request, got {len(items)}")
        return [{"role": "user", "content": vragrl_judge_prompt(items[0])}]
    if style == "lang2act":
        return [
            {"role": "system", "content": LANG2ACT_JUDGE_SYSTEM_PROMPT},
            {"role": "user", "content": lang2act_user_message(items)},
        ]
    raise InvalidInputError(f"unknown judge prompt style {style!r}; use 'vragrl' or 'lang2act'")


# --- verdict parsing -------------------------------------------------------------------------

_JUDGE_TAG = re.compile(r"<judge>(.*?)</judge>", re.DOTALL | re.IGNORECASE)


def parse_verdicts(text: str | None, n: int) -> list[Verdict]:
    """Strict parse of a judge reply that must hold exactly ``n`` ``<judge>`` tags.

    A tag counts only if its stripped content is ``true`` or ``false`` (any case): so
    ``<judge>not true</judge>`` is unscored, never True. A reply with the wrong number of
    tags is an error for every item of the batch: verdicts are never guessed by position.

    >>> parse_verdicts("<judge>True</judge><judge> false </judge>", 2)
    [Verdict(value=True, error=None), Verdict(value=False, error=None)]
    >>> parse_verdicts("<judge>not true</judge>", 1)[0].value is None
    True
    """
    tags = _JUDGE_TAG.findall(text or "")
    if len(tags) != n:
        reason = f"expected {n} <judge> tags, got {len(tags)}"
        return [Verdict(None, reason) for _ in range(n)]
    out = []
    for content in tags:
        word = content.strip().lower()
        if word in ("true", "false"):
            out.append(Verdict(word == "true"))
        else:
            out.append(Verdict(None, f"unparseable verdict {content.strip()[:40]!r}"))
    return out


# --- rule-based judge ------------------------------------------------------------------------

_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation (ASCII and Unicode) and articles, collapse whitespace."""
    lowered = unicodedata.normalize("NFKC", text).lower()
    kept = "".join(
        " " if (ch in string.punctuation or unicodedata.category(ch).startswith("P")) else ch
        for ch in lowered
    )
    return " ".join(_ARTICLES.sub(" ", kept).split())


RuleMatch = Literal["exact", "contains", "stripped_lower"]


@dataclass(frozen=True)
class RuleJudge:
    """Offline judge: ``exact`` (normalized equality), ``contains`` (normalized reference
    inside the generated answer, the VRAG-RL prompt's "may contain additional information"),
    or ``stripped_lower`` (``strip().lower()`` equality: the conformance stub judge).
    An item without a reference is unscored.
    """

    match: RuleMatch = "contains"

    def judge(self, items: Sequence[JudgeItem]) -> list[Verdict]:
        return [self._one(item) for item in items]

    def _one(self, item: JudgeItem) -> Verdict:
        if item.reference is None:
            return Verdict(None, "no reference answer")
        if self.match == "stripped_lower":
            return Verdict(item.generated.strip().lower() == item.reference.strip().lower())
        gen, ref = normalize_answer(item.generated), normalize_answer(item.reference)
        if not ref:
            return Verdict(None, "reference answer is empty after normalization")
        if self.match == "exact":
            return Verdict(gen == ref)
        return Verdict(f" {ref} " in f" {gen} ")


# --- OpenAI-compatible HTTP judge ------------------------------------------------------------


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
        try:
            response = await client.post(url, json=body)
        except httpx.HTTPError as exc:  # timeouts, refused connections, protocol errors
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
