"""A minimal OpenAI-compatible chat client for evaluation and teacher distillation.

Any server that speaks ``POST {base_url}/chat/completions`` (vLLM, SGLang, OpenAI, a local
fake in tests) can be the model under evaluation or the teacher. Images go as base64 data
URLs (``image_url`` parts), text as ``text`` parts, in message order. ``httpx`` (a core
dependency, the same client the LLM judge uses) is imported when a request is made.
"""

from __future__ import annotations

import base64
import io
import logging
import mimetypes
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidra.errors import EvidraError
from evidra.types import ImagePart, Message, TextPart

logger = logging.getLogger(__name__)


class EndpointError(EvidraError, RuntimeError):
    """The endpoint answered with an error or an unexpected body."""


def _image_url(part: ImagePart) -> str:
    if isinstance(part.image, (str, Path)):
        path = Path(part.image)
        mime = mimetypes.guess_type(path.name)[0] or "image/png"
        data = path.read_bytes()
    else:
        buf = io.BytesIO()
        part.image.save(buf, format="PNG")
        mime, data = "image/png", buf.getvalue()
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def to_openai(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """evidra messages -> OpenAI chat messages (content parts in order)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        parts: list[dict[str, Any]] = []
        for p in m.content:
            if isinstance(p, TextPart):
                parts.append({"type": "text", "text": p.text})
            elif isinstance(p, ImagePart):
                parts.append({"type": "image_url", "image_url": {"url": _image_url(p)}})
        out.append({"role": m.role, "content": parts})
    return out


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
    api_key: str = "EMPTY"
    timeout_s: float = 120.0
    retries: int = 2

    def complete(
        self, messages: Sequence[Message], *, max_tokens: int = 512, temperature: float = 0.0,
        stop: Sequence[str] = (),
    ) -> Completion:  # fmt: skip
        import httpx

        body: dict[str, Any] = {"model": self.model, "messages": to_openai(messages),
                                "max_tokens": max_tokens, "temperature": temperature}  # fmt: skip
        if stop:
            body["stop"] = list(stop)
        url = self.base_url.rstrip("/") + "/chat/completions"
        headers = {"Authorization": f"Bearer {self.api_key}"}
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            start = time.perf_counter()
            try:
                resp = httpx.post(url, json=body, headers=headers, timeout=self.timeout_s)
                resp.raise_for_status()
                data = resp.json()
                choice = data["choices"][0]
                usage = data.get("usage") or {}
                return Completion(
                    text=str(choice["message"]["content"] or ""),
                    completion_tokens=int(usage.get("completion_tokens", 0)),
                    finish_reason=str(choice.get("finish_reason") or "stop"),
                    latency_s=time.perf_counter() - start,
                )
            except (httpx.HTTPError, KeyError, IndexError, ValueError) as exc:
                last = exc
                logger.warning("endpoint %s attempt %d failed: %s", url, attempt + 1, exc)
        raise EndpointError(f"chat endpoint {url} failed after {self.retries + 1} attempts: {last}")
