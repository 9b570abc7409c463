"""Turn evidra ``Message`` conversations into model inputs.

Several images may appear in one turn and several turns may carry images; the processor
expands each ``<|image_pad|>`` placeholder into as many tokens as the resized image needs
(see ``evidra.models.context`` for tokenized contexts and batching).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from evidra.core import imagefiles
from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message, TextPart

if TYPE_CHECKING:
    from PIL.Image import Image


class ChatPart(TypedDict, total=False):
    """One part of a chat-template message: ``{"type": "text", "text": ...}`` or ``{"type": "image"}``."""

    type: str
    text: str


class ChatMessage(TypedDict):
    """A message as chat templates read it (a text-only template's content may be one string)."""

    role: str
    content: list[ChatPart] | str


def load_image(part: ImagePart) -> Image:
    """The part's image as an RGB PIL image (paths are opened and fully read)."""
    from PIL import Image

    if isinstance(part.image, (str, Path)):
        path = Path(part.image)
        if not path.is_file():
            raise InvalidInputError(f"image {str(path)!r} does not exist")
        return imagefiles.decode(path, f"image {str(path)!r}")
    if isinstance(part.image, Image.Image):
        return part.image.convert("RGB") if part.image.mode != "RGB" else part.image
    raise InvalidInputError(f"ImagePart.image must be a path or a PIL image, got {type(part.image).__name__}")


def to_chat_dicts(messages: Sequence[Message]) -> tuple[list[ChatMessage], list[Image]]:
    """Messages in the chat-template format, plus their images in order of appearance."""
    chat: list[ChatMessage] = []
    images: list[Image] = []
    for msg in messages:
        content: list[ChatPart] = []
        for part in msg.content:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            else:
                content.append({"type": "image"})
                images.append(load_image(part))
        chat.append({"role": msg.role, "content": content})
    return chat, images
