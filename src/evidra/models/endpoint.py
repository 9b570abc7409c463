"""A model under evaluation (or a distillation teacher) behind an OpenAI-compatible endpoint.

Any server that speaks ``POST {base_url}/chat/completions`` (vLLM, SGLang, OpenAI, a local
fake in tests) can be the model. ``ChatEndpoint`` turns evidra messages into one request
through ``evidra.openai.client`` (images as base64 data URLs, text parts in message order) and
keeps what the harness records: the text, the completion tokens, the finish reason and the
latency. The key comes from ``api_key`` or the variable ``api_key_env`` (``OPENAI_API_KEY``);
``retries`` extra attempts on 429/5xx/connection errors/timeouts, waiting at most
``max_wait_s`` in all; ``timeout_s`` bounds each attempt as a whole. ``ChatEndpoint.for_model``
sends every image at the resolution the model's family expects (Qwen2/2.5-VL: sides multiples of
28 within its pixel bounds; Qwen3-VL: of 32; a family of no known resize: the long side at most
2048), the size its box convention reads pixel boxes in (``evidra.core.box_formats``).

``AnsweringEndpoint`` is such a server answering ``evidra.RAG``'s questions: with ``structured``
it asks for a JSON answer (``evidra.models.structured``) through ``response_format``, and asks
once more without it, saying so in the log, when the server refuses that field (HTTP 400).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TypedDict, Unpack

from evidra.core.box_formats import BoxFormat
from evidra.core.jsonvalue import JSONObject
from evidra.core.types import Message
from evidra.openai.client import (
    DEFAULT_API_KEY_ENV,
    ChatClient,
    ChatClientError,
    ChatHTTPError,
    endpoint_config,
)
from evidra.openai.wire import ImageSize

logger = logging.getLogger(__name__)

# The error every failed call raises (a refused request, an unreachable server, a malformed
# reply); kept under this name for callers that catch it.
EndpointError = ChatClientError


@dataclass(frozen=True)
class Completion:
    text: str
    completion_tokens: int
    finish_reason: str
    latency_s: float


class EndpointOptions(TypedDict, total=False):
    """``ChatEndpoint``'s options besides the URL, the model and the image size."""

    api_key: str | None
    timeout_s: float
    retries: int
    api_key_env: str
    max_wait_s: float


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
    # the (w, h) each image is sent at, from its own: the model family's resize (``BoxFormat.sent_size``
    # of its box format, ``for_model``); None: images go as they are
    image_size: ImageSize | None = field(default=None, repr=False, compare=False)
    client: ChatClient = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        config = endpoint_config(
            self.base_url,
            self.model,
            api_key=self.api_key,
            api_key_env=self.api_key_env,
            timeout_s=self.timeout_s,
            retries=self.retries,
            max_wait_s=self.max_wait_s,
            image_size=self.image_size,
        )
        object.__setattr__(self, "client", ChatClient(config))

    @classmethod
    def for_model(
        cls, base_url: str, model: str, box_format: BoxFormat, **options: Unpack[EndpointOptions]
    ) -> ChatEndpoint:
        """The endpoint of a model whose family's box convention is ``box_format``: every image goes
        at the size that family's own resize gives it (``BoxFormat.sent_size``), the frame in which
        its pixel boxes are read back."""
        return cls(base_url, model, image_size=box_format.sent_size, **options)

    def complete(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 512,
        temperature: float = 0.0,
        stop: Sequence[str] = (),
        response_format: JSONObject | None = None,
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """The first choice for ``messages``; with ``on_text`` streamed, each piece handed to it."""
        result = self.client.chat(
            messages,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            response_format=response_format,
            on_text=on_text,
        )
        first = result.choices[0]
        return Completion(first.text, result.completion_tokens, first.finish_reason, result.latency_s)


class AnsweringEndpoint:
    """The model behind ``endpoint`` answering questions over pages (``evidra.RAG``).

    With ``structured`` every request carries the JSON schema of a structured answer as
    ``response_format``; a server that refuses it (HTTP 400) is asked again without it, once,
    and not sent it again (the instruction in the prompt still asks for JSON).
    """

    def __init__(self, endpoint: ChatEndpoint, *, structured: bool = True) -> None:
        self.endpoint = endpoint
        self.structured = structured
        self._schema_refused = False

    @property
    def name(self) -> str:
        return self.endpoint.model

    def write(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        temperature: float,
        stop: Sequence[str] = (),
        on_text: Callable[[str], None] | None = None,
    ) -> Completion:
        """The server's answer to ``messages``; with ``on_text`` the reply is streamed and each
        piece of the server's text handed to it as it arrives."""
        from evidra.models.structured import response_format

        schema = response_format() if self.structured and not self._schema_refused else None
        ask = partial(
            self.endpoint.complete,
            messages,
            max_tokens=max_tokens,
            temperature=temperature,
            stop=stop,
            on_text=on_text,
        )
        try:
            done = ask(response_format=schema)
        except ChatHTTPError as exc:
            if schema is None or exc.status != 400:
                raise
            done = ask()
            self._schema_refused = True  # the request without it went through: the field was the cause
            logger.warning(
                "%s refused response_format (%s); asked without it: the JSON answer now rests on the "
                "prompt alone",
                self.endpoint.base_url,
                exc,
            )
        return done

    def close(self) -> None:
        self.endpoint.client.close()
