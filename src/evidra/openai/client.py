"""One client for OpenAI-compatible ``POST {base_url}/chat/completions`` servers (vLLM, SGLang,
hosted APIs), used by the evaluation endpoint, the LLM judge and the data-construction teachers.

* **Key**: read from the environment variable named by ``api_key_env`` (``OPENAI_API_KEY`` by
  default; ``""`` sends none) unless an explicit ``api_key`` is given, and sent as
  ``Authorization: Bearer``; no header at all when the variable is unset, or when ``key_policy``
  says a file, not the user, named the URL and ``EVIDRA_KEY_HOSTS`` does not allow the pair
  (``evidra.safeio.keys``). The key is never logged, never part of a ``repr``, and replaced by ``***``
  wherever the server's text reaches an error message (a server may echo it).
* **Retries**: 429, 5xx, refused or dropped connections and timeouts are retried, at most
  ``RetryPolicy.max_attempts`` requests in all, after an exponential backoff with jitter
  (``retry_delay``), or after the server's ``Retry-After`` when it sends one, in both cases at
  most ``max_backoff_s``. ``max_wait_s`` bounds the time spent waiting between attempts over
  the whole call: a wait that would pass it ends the call. Any other 4xx fails at once with
  ``ChatHTTPError`` (one line naming the URL, the status and the server's message).
* **Timeout**: ``timeout_s`` bounds every attempt as a whole, wall clock over connect, send and
  every read, so a server that trickles a byte at a time cannot hold a call; a call lasts at
  most ``max_attempts * timeout_s + max_wait_s``.
* **Images**: sent as data URLs, each resized to ``ClientConfig.image_size`` of its size when
  that is set (an answering or evaluated model's family resize, ``evidra.models.endpoint``).
* **Replies**: the text of every choice (``n`` samples), read through ``evidra.http.replies``: at most
  ``max_reply_bytes`` decoded bytes (gzip inflated within the cap), strict JSON. A 2xx body over
  the cap, not JSON, or not a chat completion raises ``MalformedResponseError`` (not retried:
  callers such as the judge decide).

``AsyncChatClient`` is the core (``async with`` it to share one connection pool among
concurrent calls); ``ChatClient`` is its blocking form, running the calls of every thread on
one private event loop so that they share one connection pool too.

>>> client = ChatClient(ClientConfig("http://127.0.0.1:8000/v1", "Qwen2.5-VL-7B"))  # doctest: +SKIP
>>> client.chat([{"role": "user", "content": "Say hi"}], n=2).texts               # doctest: +SKIP
('Hi!', 'Hello!')
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
import random
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.utils import parsedate_to_datetime
from typing import TYPE_CHECKING, TypeVar

from evidra.core.errors import ConfigError, InvalidInputError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.types import Message
from evidra.http.replies import (
    ERROR_BODY_BYTES,
    MAX_REPLY_BYTES,
    REQUEST_HEADERS,
    LoopThread,
    ReplyError,
    aread_capped,
)
from evidra.http.replies import loads as loads_reply
from evidra.openai.wire import ChatClientError as ChatClientError
from evidra.openai.wire import ChatHTTPError as ChatHTTPError
from evidra.openai.wire import ChatResult as ChatResult
from evidra.openai.wire import ChatUnavailableError as ChatUnavailableError
from evidra.openai.wire import Choice as Choice
from evidra.openai.wire import ImageSize, parse_completion, request_body, server_message
from evidra.openai.wire import MalformedResponseError as MalformedResponseError
from evidra.openai.wire import to_openai as to_openai
from evidra.safeio.keys import KeyPolicy, redact

if TYPE_CHECKING:
    import httpx

logger = logging.getLogger(__name__)

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
T = TypeVar("T")
ChatMessages = Sequence[Message | Mapping[str, JSON]]
OnText = Callable[[str], None]  # receives each piece of a streamed reply


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long a call retries 429/5xx/connection errors/timeouts."""

    max_attempts: int = 3  # requests in all, the first included
    backoff_s: float = 1.0  # ceiling of the first wait; doubles each retry
    max_backoff_s: float = 30.0  # longest single wait, Retry-After included
    max_wait_s: float = 120.0  # longest total wait between attempts of one call
    jitter: float = 0.5  # a wait is drawn from [(1 - jitter) * ceiling, ceiling]

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise InvalidInputError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if min(self.backoff_s, self.max_backoff_s, self.max_wait_s) < 0:
            raise InvalidInputError(
                f"backoff_s, max_backoff_s and max_wait_s must be >= 0, got "
                f"{self.backoff_s}, {self.max_backoff_s}, {self.max_wait_s}"
            )
        if not 0.0 <= self.jitter <= 1.0:
            raise InvalidInputError(f"jitter must be in [0, 1], got {self.jitter}")


def retry_delay(policy: RetryPolicy, retry: int, retry_after: float | None, rand: float) -> float:
    """Seconds to wait before retry number ``retry`` (1-based); ``rand`` is uniform in [0, 1).

    Without ``Retry-After``: ``min(max_backoff_s, backoff_s * 2**(retry - 1))`` scaled down by
    up to ``jitter`` so that concurrent callers do not retry in lockstep. With it: the server's
    value, up to ``max_backoff_s``.

    >>> p = RetryPolicy(backoff_s=1.0, max_backoff_s=5.0, jitter=0.5)
    >>> retry_delay(p, 1, None, 0.0), retry_delay(p, 3, None, 1.0), retry_delay(p, 5, None, 0.0)
    (1.0, 2.0, 5.0)
    >>> retry_delay(p, 1, 3.0, 0.9), retry_delay(p, 1, 60.0, 0.9)
    (3.0, 5.0)
    """
    if retry_after is not None:
        return min(policy.max_backoff_s, retry_after)
    ceiling = min(policy.max_backoff_s, policy.backoff_s * 2.0 ** min(retry - 1, 60))
    return ceiling * (1.0 - policy.jitter * rand)


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """A ``Retry-After`` header in seconds (delay-seconds or an HTTP date); None if absent or bad.

    >>> parse_retry_after("7"), parse_retry_after("soon"), parse_retry_after(None)
    (7.0, None, None)
    >>> parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT",
    ...                   now=datetime(2015, 10, 21, 7, 28, 0, tzinfo=timezone.utc))
    30.0
    """
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = (when - (now or datetime.now(timezone.utc))).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else None


@dataclass(frozen=True)
class ClientConfig:
    """Where to send requests and how long to keep trying."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1; requests go to {base_url}/chat/completions
    model: str
    api_key_env: str = DEFAULT_API_KEY_ENV  # variable holding the key; "": send none
    api_key: str | None = field(default=None, repr=False)  # an explicit key wins over api_key_env
    timeout_s: float = 120.0  # one attempt, wall clock over connect, send and every read
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    key_policy: KeyPolicy = field(default_factory=KeyPolicy)  # who named base_url (the user by default)
    max_reply_bytes: int = MAX_REPLY_BYTES  # a longer reply (decoded) is refused
    # the (w, h) each image is sent at, from its own (the model family's resize); None: as it is
    image_size: ImageSize | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.base_url.startswith(("http://", "https://")):
            raise InvalidInputError(
                f"base_url must be the http(s) URL of an OpenAI-compatible server (…/v1), "
                f"got {self.base_url!r}"
            )
        if not self.model:
            raise InvalidInputError(f"model is empty: name the model that {self.base_url} serves")
        if not self.timeout_s > 0:
            raise InvalidInputError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_reply_bytes < 1:
            raise InvalidInputError(f"max_reply_bytes must be >= 1, got {self.max_reply_bytes}")

    @property
    def url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"

    def key(self) -> str | None:
        """The key to send: ``api_key`` when given (``""``: none), else ``$api_key_env`` where
        ``key_policy`` lets it go to ``base_url``."""
        if self.api_key is not None:
            return self.api_key or None
        return self.key_policy.key(self.api_key_env, self.url)

    def no_key_hint(self) -> str:
        """Why no key went with a request, for a 401/403 message."""
        if self.api_key is None and self.key_policy.withheld(self.api_key_env, self.url):
            return self.key_policy.withheld_hint(self.api_key_env, self.url)
        return "no API key was sent"


def endpoint_config(
    base_url: str,
    model: str,
    *,
    api_key: str | None = None,
    api_key_env: str = DEFAULT_API_KEY_ENV,
    timeout_s: float = 120.0,
    retries: int = 2,
    max_wait_s: float = 120.0,
    key_policy: KeyPolicy | None = None,
    image_size: ImageSize | None = None,
) -> ClientConfig:
    """A ``ClientConfig`` from the flat fields the endpoint and teacher configs carry:
    ``retries`` extra attempts, the default backoff, ``max_wait_s`` of waiting in all."""
    if retries < 0:
        raise InvalidInputError(f"retries must be >= 0, got {retries}")
    retry = RetryPolicy(max_attempts=retries + 1, max_wait_s=max_wait_s)
    return ClientConfig(
        base_url,
        model,
        api_key_env=api_key_env,
        api_key=api_key,
        timeout_s=timeout_s,
        retry=retry,
        key_policy=key_policy or KeyPolicy(),
        image_size=image_size,
    )


def check_api_key_env(name: str, option: str) -> None:
    """``ConfigError`` when ``name`` is a variable other than the default and it is unset: a
    variable named on purpose is expected to hold a key (the default may be unset, for a local
    server that needs none)."""
    if name and name != DEFAULT_API_KEY_ENV and not os.environ.get(name):
        raise ConfigError(
            f"{option} {name}: that environment variable is not set; export it, or pass "
            f"the variable that holds the key"
        )


class _Transient(Exception):
    """A failed attempt worth retrying; ``retry_after`` is the server's wish, in seconds."""

    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


class AsyncChatClient:
    """Async chat completions with retries; ``async with`` shares one pool among calls."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._http: httpx.AsyncClient | None = None
        self._rng = random.Random()

    async def __aenter__(self) -> AsyncChatClient:
        import httpx  # a core dependency, imported when a client is opened

        self._http = httpx.AsyncClient(timeout=httpx.Timeout(self.config.timeout_s))
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def chat(
        self,
        messages: ChatMessages,
        *,
        n: int = 1,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        max_attempts: int | None = None,
        response_format: Mapping[str, JSON] | None = None,
        on_text: OnText | None = None,
    ) -> ChatResult:
        """The text choices for ``messages``; ``max_attempts`` overrides the policy's;
        ``response_format`` asks for structured output (a 400 if the server does not take it).
        With ``on_text`` (one choice) the reply is streamed, each piece of text handed to it as it
        arrives; a failure after the first piece is not retried (the text is already out)."""
        if n < 1:
            raise InvalidInputError(f"n must be >= 1, got {n}")
        if self._http is None:  # not opened: a client of its own for this one call
            async with self:
                return await self.chat(
                    messages,
                    n=n,
                    max_tokens=max_tokens,
                    temperature=temperature,
                    stop=stop,
                    max_attempts=max_attempts,
                    response_format=response_format,
                    on_text=on_text,
                )
        if on_text is not None and n != 1:
            raise InvalidInputError(f"on_text streams one choice, got n={n}")
        body = request_body(
            self.config.model,
            messages,
            n=n,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            response_format=response_format,
            size_for=self.config.image_size,
        )
        stream = _Stream(on_text) if on_text is not None else None
        if stream is not None:
            body["stream"] = True
        return await self._with_retries(body, max_attempts or self.config.retry.max_attempts, stream)

    async def _with_retries(
        self, body: JSONObject, attempts: int, stream: _Stream | None = None
    ) -> ChatResult:
        policy, url = self.config.retry, self.config.url
        waited = 0.0
        for attempt in range(1, attempts + 1):
            start = time.perf_counter()
            try:
                data = await self._attempt(body, stream)
            except _Transient as exc:
                if stream is not None and stream.started:
                    raise ChatUnavailableError(
                        f"{url}: the stream broke after its text began: {exc}", attempt
                    ) from None
                if attempt == attempts:
                    raise ChatUnavailableError(
                        f"{url}: no answer after {attempt} attempts: {exc}", attempt
                    ) from None
                delay = retry_delay(policy, attempt, exc.retry_after, self._rng.random())
                if waited + delay > policy.max_wait_s:
                    raise ChatUnavailableError(
                        f"{url}: gave up after {attempt} attempts ({exc}): waiting {delay:.2f} s more would "
                        f"pass the retry budget max_wait_s={policy.max_wait_s}",
                        attempt,
                    ) from None
                logger.warning(
                    "%s: attempt %d of %d failed (%s); retrying in %.2f s", url, attempt, attempts, exc, delay
                )
                await asyncio.sleep(delay)
                waited += delay
                continue
            except ChatClientError as exc:
                exc.attempts = attempt
                raise
            return parse_completion(data, url, attempt, time.perf_counter() - start, (self.config.key(),))
        raise AssertionError("unreachable: the loop returns or raises")

    async def _post(self, body: JSONObject, headers: dict[str, str]) -> tuple[int, str | None, bytes]:
        """Status, ``Retry-After`` and the body (capped: a whole 2xx one, the start of another)."""
        assert self._http is not None
        async with self._http.stream("POST", self.config.url, json=body, headers=headers) as response:
            ok = 200 <= response.status_code < 300
            cap = self.config.max_reply_bytes if ok else ERROR_BODY_BYTES
            raw = await aread_capped(response, cap, truncate=not ok)
            return response.status_code, response.headers.get("Retry-After"), raw

    async def _post_stream(
        self, body: JSONObject, headers: dict[str, str], stream: _Stream
    ) -> tuple[int, str | None, bytes, JSON]:
        """Status, ``Retry-After``, an error body (capped) or the streamed reply as a completion."""
        from evidra.openai.stream import read_stream

        assert self._http is not None
        headers = {**headers, "Accept-Encoding": "identity"}  # events are read as they come
        async with self._http.stream("POST", self.config.url, json=body, headers=headers) as response:
            if not 200 <= response.status_code < 300:
                raw = await aread_capped(response, ERROR_BODY_BYTES, truncate=True)
                return response.status_code, response.headers.get("Retry-After"), raw, None
            encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("identity", ""):
                raise ReplyError(f"a stream in Content-Encoding {encoding[:40]!r}; evidra asked for none")
            reply = await read_stream(response.aiter_raw(), self.config.max_reply_bytes, stream.hand_on)
            return response.status_code, None, b"", reply

    async def _attempt(self, body: JSONObject, stream: _Stream | None = None) -> JSON:
        """One request; its decoded JSON, or ``_Transient`` / ``ChatClientError``."""
        import httpx

        from evidra.openai.stream import StreamFailed

        url, key = self.config.url, self.config.key()
        headers = {**REQUEST_HEADERS, **({"Authorization": f"Bearer {key}"} if key else {})}
        streamed: JSON = None
        try:  # wait_for bounds the whole attempt; httpx's own timeouts bound each phase only
            if stream is None:
                status, retry_after, raw = await asyncio.wait_for(
                    self._post(body, headers), self.config.timeout_s
                )
            else:
                status, retry_after, raw, streamed = await asyncio.wait_for(
                    self._post_stream(body, headers, stream), self.config.timeout_s
                )
        except asyncio.TimeoutError:
            raise _Transient(f"no complete reply within timeout_s={self.config.timeout_s:g}") from None
        except httpx.TransportError as exc:  # refused, reset, protocol errors, httpx's phase timeouts
            raise _Transient(redact(f"{type(exc).__name__}: {exc}", (key,))) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise ChatClientError(redact(f"{url}: {type(exc).__name__}: {exc}", (key,))) from None
        except ReplyError as exc:  # over the cap, or an encoding evidra does not decode
            raise MalformedResponseError(f"{url} answered with {exc}") from None
        except StreamFailed as exc:  # an error event after the 200: the server failed mid-way
            raise _Transient(f"error in the stream: {redact(str(exc), (key,))}") from None
        text = raw.decode("utf-8", "replace")
        if status == 429 or status >= 500:
            message = server_message(text, secrets=(key,))
            raise _Transient(f"HTTP {status}: {message}", parse_retry_after(retry_after))
        if not 200 <= status < 300:
            hint = ""
            if status in (401, 403):
                source = "api_key" if self.config.api_key is not None else f"${self.config.api_key_env}"
                hint = f"; check the API key (from {source})" if key else f"; {self.config.no_key_hint()}"
            raise ChatHTTPError(
                f"HTTP {status} from {url}: {server_message(text, secrets=(key,))}{hint}", status
            )
        if streamed is not None:
            return streamed
        try:
            return loads_reply(raw)
        except ReplyError as exc:
            raise MalformedResponseError(
                f"{url} answered HTTP {status} with {exc}: {server_message(text, 80, (key,))}"
            ) from None


class _Stream:
    """Where a streamed reply's text goes, and whether any has gone (then no retry)."""

    def __init__(self, on_text: OnText) -> None:
        self.on_text, self.started = on_text, False

    def hand_on(self, piece: str) -> None:
        self.started = True
        self.on_text(piece)


class _LoopThread(LoopThread):
    """An event loop running in a daemon thread, with one open ``AsyncChatClient`` on it."""

    def __init__(self, config: ClientConfig) -> None:
        super().__init__("evidra-chat-client")
        self.client = AsyncChatClient(config)
        self.run(self.client.__aenter__())

    def submit(self, coro: Coroutine[object, None, T]) -> T:
        return self.run(coro)

    def close(self, last: Coroutine[object, None, object] | None = None) -> None:
        super().close(last or self.client.__aexit__())


class ChatClient:
    """The blocking form of ``AsyncChatClient``, safe to share among threads.

    Calls run on a private event loop in a daemon thread, started by the first call, so all
    calls share one connection pool (one TLS set-up, keep-alive) and overlap when made from
    several threads. ``close()`` (or garbage collection) stops it.
    """

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._runner: _LoopThread | None = None

    # a pickled client (another process) starts its own loop
    def __getstate__(self) -> dict[str, ClientConfig]:
        return {"config": self.config}

    def __setstate__(self, state: dict[str, ClientConfig]) -> None:
        self.__init__(state["config"])  # type: ignore[misc]

    def _loop_thread(self) -> _LoopThread:
        with self._lock:
            if self._runner is None or self._runner.pid != os.getpid():  # none yet, or a forked child
                self._runner = _LoopThread(self.config)
                weakref.finalize(self, self._runner.close)
            return self._runner

    def chat(
        self,
        messages: ChatMessages,
        *,
        n: int = 1,
        max_tokens: int | None = None,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        max_attempts: int | None = None,
        response_format: Mapping[str, JSON] | None = None,
        on_text: OnText | None = None,
    ) -> ChatResult:
        """``AsyncChatClient.chat``, blocking; ``on_text`` runs on the client's own thread."""
        runner = self._loop_thread()
        call = runner.client.chat(
            messages,
            n=n,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            max_attempts=max_attempts,
            response_format=response_format,
            on_text=on_text,
        )
        return runner.submit(call)

    def close(self) -> None:
        with self._lock:
            runner, self._runner = self._runner, None
        if runner is not None:
            runner.close()


def run_sync(coro: Coroutine[object, None, T]) -> T:
    """Run ``coro`` to completion from blocking code, in a worker thread when this thread
    already runs an event loop (a notebook, an async caller)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()
