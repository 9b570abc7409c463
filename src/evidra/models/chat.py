"""Turn evidra ``Message`` conversations into model inputs.

Several images may appear in one turn and several turns may carry images; the processor
expands each ``<|image_pad|>`` placeholder into as many tokens as the resized image needs.
Batches are left-padded so every prompt ends at the same position, which generation needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evidra.errors import InvalidInputError
from evidra.types import ImagePart, Message, TextPart


def load_image(part: ImagePart) -> Any:
    """The part's image as an RGB PIL image (paths are opened and fully read)."""
    from PIL import Image

    if isinstance(part.image, (str, Path)):
        path = Path(part.image)
        if not path.is_file():
            raise InvalidInputError(f"image {str(path)!r} does not exist")
        with Image.open(path) as im:
            return im.convert("RGB")
    if isinstance(part.image, Image.Image):
        return part.image.convert("RGB") if part.image.mode != "RGB" else part.image
    raise InvalidInputError(f"ImagePart.image must be a path or a PIL image, got {type(part.image).__name__}")


def to_chat_dicts(messages: Sequence[Message]) -> tuple[list[dict[str, Any]], list[Any]]:
    """Messages in the chat-template format, plus their images in order of appearance."""
    chat: list[dict[str, Any]] = []
    images: list[Any] = []
    for msg in messages:
        content: list[dict[str, Any]] = []
        for part in msg.content:
            if isinstance(part, TextPart):
                content.append({"type": "text", "text": part.text})
            else:
                content.append({"type": "image"})
                images.append(load_image(part))
        chat.append({"role": msg.role, "content": content})
    return chat, images


def render_prompt(processor: Any, messages: Sequence[Message], *, add_generation_prompt: bool = True) -> str:
    """The chat template applied to ``messages`` (one placeholder per image, not expanded)."""
    chat, _ = to_chat_dicts(messages)
    text = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=add_generation_prompt)
    return str(text)


def encode_chats(
    processor: Any, chats: Sequence[Sequence[Message]], *, add_generation_prompt: bool = True
) -> Any:
    """Tokenize a batch of conversations with their images, left-padded.

    Returns the processor's ``BatchFeature``: ``input_ids``/``attention_mask`` ``(B, P)`` and,
    when any image is present, ``pixel_values`` ``(sum patches, D)`` and ``image_grid_thw``
    ``(num_images, 3)`` in the order the images appear across the batch.
    """
    if not chats:
        raise InvalidInputError("encode_chats needs at least one conversation")
    texts: list[str] = []
    images: list[Any] = []
    for messages in chats:
        chat, imgs = to_chat_dicts(messages)
        texts.append(
            str(
                processor.apply_chat_template(
                    chat, tokenize=False, add_generation_prompt=add_generation_prompt
                )
            )
        )
        images.extend(imgs)
    processor.tokenizer.padding_side = "left"
    return processor(text=texts, images=images or None, padding=True, return_tensors="pt")
