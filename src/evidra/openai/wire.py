"""The OpenAI chat-completions wire format: request messages and body, reply parsing, errors.

Pure functions with no I/O besides reading an image file for its data URL; the HTTP client
that sends these bodies is ``evidra.openai.client``. evidra ``Message``s become OpenAI
messages whose content is a list of parts in order: ``{"type": "text"}`` and
``{"type": "image_url"}`` with the image inlined as a base64 data URL, so the server needs no
access to evidra's files. Given ``size_for`` (an endpoint's: the model family's resize, see
``evidra.core.box_formats.BoxFormat.sent_size``), each image is resized to the size it gives
before it is encoded, PNG unless that passes ``MAX_IMAGE_BYTES`` (then JPEG).

>>> from evidra.core.types import Message
>>> to_openai([Message.text("user", "hi")])
[{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}]
>>> parse_completion({"choices": [{"message": {"content": "yes"}}]}, "http://h/v1", 1, 0.1).texts
('yes',)
"""

from __future__ import annotations

import base64
import io
import json
import mimetypes
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core import imagefiles
from evidra.core.errors import EvidraError, InvalidInputError
from evidra.core.jsonvalue import JSON, JSONObject, at, need_int, need_object
from evidra.core.types import ImagePart, Message, TextPart
from evidra.http.replies import ReplyError, loads
from evidra.safeio.keys import redact

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

WireMessage = JSONObject  # one OpenAI chat message, as sent
ImageSize = Callable[[tuple[int, int]], tuple[int, int]]  # an image's (w, h) -> the (w, h) it is sent at
MAX_IMAGE_BYTES = imagefiles.MAX_DATA_URL_BYTES  # encoded bytes of one image sent (a data URL's cap)


class ChatClientError(EvidraError, RuntimeError):
    """A chat-completions call failed; ``attempts`` is how many requests it made."""

    def __init__(self, message: str, attempts: int = 1) -> None:
        super().__init__(message)
        self.attempts = attempts


class ChatHTTPError(ChatClientError):
    """The server refused the request (a 4xx other than 429): retrying cannot help."""

    def __init__(self, message: str, status: int, attempts: int = 1) -> None:
        super().__init__(message, attempts)
        self.status = status


class ChatUnavailableError(ChatClientError):
    """429, 5xx, a refused connection or a timeout persisted through the bounded retries."""


class MalformedResponseError(ChatClientError):
    """A 2xx reply that is not a chat completion (not JSON, no ``choices``, no message)."""


@dataclass(frozen=True)
class Choice:
    text: str
    finish_reason: str  # "stop", "length", ...; "stop" when the server gives none


@dataclass(frozen=True)
class ChatResult:
    """The text choices of one call (``n`` of them, in the server's index order)."""

    choices: tuple[Choice, ...]
    completion_tokens: int  # usage.completion_tokens; 0 when the server reports no usage
    latency_s: float  # of the request that succeeded
    attempts: int  # requests made, the successful one included

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(c.text for c in self.choices)

    @property
    def text(self) -> str:
        """The first choice's text."""
        return self.choices[0].text


def _data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def _encoded(image: PILImage) -> tuple[str, bytes]:
    """``image`` as PNG, or as JPEG (quality 90) when the PNG passes ``MAX_IMAGE_BYTES``; a JPEG
    still over it is an error naming the size (nothing shrinks an image behind the caller's back,
    whose boxes are read at the size sent)."""
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    if buf.tell() <= MAX_IMAGE_BYTES:
        return "image/png", buf.getvalue()
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=90)
    if buf.tell() > MAX_IMAGE_BYTES:
        raise InvalidInputError(
            f"an image of {image.width}x{image.height} pixels is {buf.tell()} bytes even as JPEG, over the "
            f"{MAX_IMAGE_BYTES} bytes an image may have; send a smaller one"
        )
    return "image/jpeg", buf.getvalue()


def _image_url(part: ImagePart, size_for: ImageSize | None = None) -> str:
    """The image of ``part`` as a data URL: as it is without ``size_for``; with it, resized to
    ``size_for((w, h))`` (a file of that size already, and under the cap, goes as its own bytes)."""
    source = part.image
    if isinstance(source, (str, Path)):
        path = Path(source)
        if size_for is not None:
            size = imagefiles.size(path, f"image {path.name}")
            if size_for(size) != size:
                return _image_url(ImagePart(imagefiles.decode(path, f"image {path.name}")), size_for)
        data = path.read_bytes()
        if len(data) <= MAX_IMAGE_BYTES:
            return _data_url(mimetypes.guess_type(path.name)[0] or "image/png", data)
        return _data_url(*_encoded(imagefiles.decode(path, f"image {path.name}")))
    target = size_for(source.size) if size_for is not None else source.size
    if target != source.size:
        from PIL.Image import Resampling

        source = source.convert("RGB").resize(target, Resampling.BICUBIC)  # Qwen-VL's processor's filter
    return _data_url(*_encoded(source))


def to_openai(messages: Sequence[Message], size_for: ImageSize | None = None) -> list[WireMessage]:
    """evidra messages -> OpenAI chat messages (content parts in order, images as data URLs, each
    resized to ``size_for`` of its size when given: the resolution the model's family expects)."""
    out: list[WireMessage] = []
    for m in messages:
        parts: list[JSON] = []
        for p in m.content:
            if isinstance(p, TextPart):
                parts.append({"type": "text", "text": p.text})
            elif isinstance(p, ImagePart):
                parts.append({"type": "image_url", "image_url": {"url": _image_url(p, size_for)}})
        out.append({"role": m.role, "content": parts})
    return out


def wire_messages(
    messages: Sequence[Message | Mapping[str, JSON]], size_for: ImageSize | None = None
) -> list[WireMessage]:
    """evidra ``Message``s converted, OpenAI messages (mappings) passed through as they are."""
    return [to_openai([m], size_for)[0] if isinstance(m, Message) else dict(m) for m in messages]


def request_body(
    model: str,
    messages: Sequence[Message | Mapping[str, JSON]],
    *,
    n: int = 1,
    max_tokens: int | None = None,
    temperature: float = 0.0,
    stop: Sequence[str] = (),
    response_format: Mapping[str, JSON] | None = None,
    size_for: ImageSize | None = None,
) -> JSONObject:
    """The JSON body of ``POST /chat/completions``; unset options are left to the server.
    ``response_format`` asks for structured output (``{"type": "json_schema", ...}``);
    ``size_for`` gives the size each image is sent at (None: as it is)."""
    wired: list[JSON] = list(wire_messages(messages, size_for))
    body: JSONObject = {"model": model, "messages": wired, "temperature": temperature}
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if n != 1:
        body["n"] = n
    if stop:
        body["stop"] = list(stop)
    if response_format is not None:
        body["response_format"] = dict(response_format)
    return body


def _choice(raw: JSON) -> Choice:
    content = at(raw, "message", "content")
    if content is not None and not isinstance(content, str):
        raise TypeError(f"message content is {type(content).__name__}, not text")
    finish = raw.get("finish_reason") if isinstance(raw, dict) else None
    return Choice(content or "", str(finish or "stop"))


def parse_completion(
    data: JSON, url: str, attempts: int, latency_s: float, secrets: Sequence[str | None] = ()
) -> ChatResult:
    """A decoded JSON reply -> ``ChatResult``; ``MalformedResponseError`` when it is not one (its
    message shows the start of the reply, with each of ``secrets`` replaced by ``***``)."""
    try:
        reply = need_object(data, "the reply")
        raw = reply["choices"]
        if not isinstance(raw, list) or not raw:
            raise ValueError("'choices' is empty or not a list")
        ordered = sorted(raw, key=lambda c: need_int(need_object(c, "a choice").get("index", 0), "index"))
        choices = tuple(_choice(c) for c in ordered)
        usage = need_object(reply.get("usage") or {}, "usage")
        tokens = need_int(usage.get("completion_tokens") or 0, "completion_tokens")
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, OverflowError) as exc:
        shown = redact(json.dumps(data), secrets)[:120]
        raise MalformedResponseError(
            f"{url} answered with no chat completion ({type(exc).__name__}: {exc}): {shown}", attempts
        ) from None
    return ChatResult(choices, tokens, latency_s, attempts)


def server_message(text: str, limit: int = 200, secrets: Sequence[str | None] = ()) -> str:
    """The server's short error message, on one line: OpenAI's ``error.message``, vLLM's
    ``message``, FastAPI's ``detail``, else the body itself, cut to ``limit`` characters; each of
    ``secrets`` (the key sent) is replaced by ``***`` before the cut, so no part of it shows.

    >>> server_message('{"error": {"message": "model  x   not found", "code": 404}}')
    'model x not found'
    >>> server_message("<html>Bad Gateway</html>", limit=12)
    '<html>Bad G…'
    """
    found: JSON = text
    try:
        data = loads(text)
    except ReplyError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        found = (err.get("message") if isinstance(err, dict) else err) or data.get("message")
        found = found or data.get("detail") or text
    line = " ".join(redact(str(found), secrets).split()) or "(empty body)"
    return line if len(line) <= limit else line[: limit - 1] + "…"
