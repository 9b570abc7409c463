"""A model under evaluation (or a distillation teacher) behind an OpenAI-compatible endpoint.

Any server that speaks ``POST {base_url}/chat/completions`` (vLLM, SGLang, OpenAI, a local
fake in tests) can be the model. ``ChatEndpoint`` turns evidra messages into one request
through ``evidra.openai_client`` (images as base64 data URLs, text parts in message order) and
keeps what the harness records: the text, the completion tokens, the finish reason and the
latency. The key comes from ``api_key`` or the variable ``api_key_env`` (``OPENAI_API_KEY``);
``retries`` extra attempts on 429/5xx/connection errors/timeouts, waiting at most
``max_wait_s`` in all; ``timeout_s`` bounds each attempt as a whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from evidra.openai_client import DEFAULT_API_KEY_ENV, ChatClient, ChatClientError, endpoint_config
from evidra.types import Message

# The error every failed call raises (a refused request, an unreachable server, a malformed
# reply); kept under this name for callers that catch it.
EndpointError = ChatClientError


@dataclass(frozen=True)
class Completion:
    text: str
    completion_tokens: int
    finish_reason: str
    latency_s: float


@dataclass(frozen=True)
class ChatEndpoint:
    """``complete(messages)`` against ``base_url`` (e.g. ``http://127.0.0.1:8000/v1``)."""

    base_url: str
    model: str
    api_key: str | None = field(default=None, repr=False)  # None: read api_key_env; "": send none
    timeout_s: float = 120.0  # one attempt, wall clock
    retries: int = 2  # extra attempts on 429/5xx/connection errors/timeouts
    api_key_env: str = DEFAULT_API_KEY_ENV
    max_wait_s: float = 120.0  # total wait between attempts of one call
    client: ChatClient = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        config = endpoint_config(
            self.base_url, self.model, api_key=self.api_key, api_key_env=self.api_key_env,
            timeout_s=self.timeout_s, retries=self.retries, max_wait_s=self.max_wait_s,
        )  # fmt: skip
        object.__setattr__(self, "client", ChatClient(config))

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, temperature: float = 0.0,
        stop: Sequence[str] = (),
    ) -> Completion:  # fmt: skip
        result = self.client.chat(messages, max_tokens=max_tokens, temperature=temperature, stop=stop)
        first = result.choices[0]
        return Completion(first.text, result.completion_tokens, first.finish_reason, result.latency_s)
