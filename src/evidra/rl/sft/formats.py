"""SFT rows in the formats other trainers read: TRL/OpenAI ``messages`` and LLaMA-Factory's ShareGPT.

Each format is a registered ``SFTFormat``: ``claims(row)`` says whether a row is unmistakably
of that format (used to detect a file's format), ``read(row, where)`` turns one row into an
evidra conversation. A row that cannot be trained on (an image missing, a placeholder count
that does not match the images, no assistant turn) raises ``SkippedRow``; the reader
(``evidra.rl.sft.files``) skips it with one warning naming the file and line.

* ``messages`` (TRL, OpenAI): ``{"messages": [{"role", "content"}], "images": [...]}``; content is
  a string or a list of parts: ``{"type": "text", "text"}``, ``{"type": "image"}`` (filled in
  order from ``images``), ``{"type": "image", "image": PATH}`` or ``{"type": "image_url",
  "image_url": {"url": PATH or data URL}}``.
* ``sharegpt`` (LLaMA-Factory): ``{"conversations": [{"from": "human"|"gpt"|..., "value"}],
  "images": [...], "system": ...}`` or the same under ``"messages"`` with ``role``/``content``;
  each ``<image>`` in a turn's text is the next image of ``images``, and their counts must be
  equal (LLaMA-Factory's rule). Turns alternate user side (``human``, ``observation``) and
  assistant side (``gpt``, ``function_call``), as LLaMA-Factory requires; an optional first
  ``system`` turn overrides the ``system`` column.

Image paths are relative to the data file's folder and must stay inside it (the rule of
benchmark records, ``inside_folder``); ``data:`` URLs are decoded in memory; remote URLs are
refused (nothing is downloaded).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evidra.core import imagefiles
from evidra.core.errors import InvalidInputError
from evidra.core.jsonvalue import JSON
from evidra.core.registry import Registry
from evidra.core.types import ImagePart, Message, Part, Role, TextPart
from evidra.data.loaders._records import inside_folder

IMAGE_TOKEN = "<image>"  # LLaMA-Factory's image placeholder (its IMAGE_PLACEHOLDER default)


class SkippedRow(InvalidInputError):
    """A row that cannot be trained on; the message says why (the reader adds file and line)."""


@dataclass(frozen=True)
class RowSource:
    """Where a row comes from: its file (image paths resolve in and must stay in its folder)."""

    file: Path
    line: int

    @property
    def folder(self) -> Path:
        return self.file.parent


@dataclass(frozen=True)
class SFTFormat:
    """One row format: ``claims`` recognises its rows, ``read`` turns one into a conversation
    (``None`` for a row kept in the file but not trained on, such as a rejected trajectory)."""

    name: str
    claims: Callable[[Mapping[str, JSON]], bool]
    read: Callable[[Mapping[str, JSON], RowSource], list[Message] | None]


SFT_FORMATS: Registry[SFTFormat] = Registry("SFT data format")


# images ------------------------------------------------------------------------------------------
def _data_url_image(url: str) -> ImagePart:
    """The image of a base64 data URL, its bytes and pixels checked against the caps first."""
    name = f"image data URL {url[:40]!r}..."
    return ImagePart(
        imagefiles.decode(imagefiles.data_url_bytes(url, name, error=SkippedRow), name, error=SkippedRow)
    )


def resolve_image(ref: JSON, where: RowSource) -> ImagePart:
    """An image reference of a row (path, ``file://`` path, data URL, or ``{"path"|"url"}``) as
    an ``ImagePart``; ``SkippedRow`` if it is remote, outside the file's folder, or unreadable.

    >>> resolve_image("../secret.png", RowSource(Path("/data/sft/train.jsonl"), 3))
    Traceback (most recent call last):
    ...
    evidra.rl.sft.formats.SkippedRow: image path '../secret.png' points outside the dataset folder ...
    """
    if isinstance(ref, Mapping):
        ref = ref.get("path") or ref.get("url") or ref.get("image")
    if not isinstance(ref, str) or not ref:
        raise SkippedRow(f"image reference {ref!r:.60} is neither a path nor a data URL")
    if ref.startswith("data:"):
        return _data_url_image(ref)
    if ref.startswith(("http://", "https://")):
        raise SkippedRow(f"image {ref[:80]!r} is remote; nothing is downloaded, save it beside the data file")
    text = ref.removeprefix("file://")
    path = Path(text) if Path(text).is_absolute() else where.folder / text
    if not inside_folder(path, where.folder):
        raise SkippedRow(
            f"image path {ref[:120]!r} points outside the dataset folder {str(where.folder)!r}; "
            "a row may only name files inside it"
        )
    if not path.is_file():
        raise SkippedRow(f"image file {str(path)!r} does not exist")
    imagefiles.size(path, f"image file {str(path)!r}", error=SkippedRow)  # decoded later, under the cap
    return ImagePart(str(path.absolute()))


def _row_images(row: Mapping[str, JSON]) -> list[JSON]:
    images = row.get("images", row.get("image"))
    if images is None:
        return []
    return list(images) if isinstance(images, Sequence) and not isinstance(images, str) else [images]


def _conversation(messages: list[Message]) -> list[Message]:
    """The conversation, once it has an assistant turn and no image inside one."""
    if not any(m.role == "assistant" for m in messages):
        raise SkippedRow("no assistant turn to learn from")
    if any(m.role == "assistant" and m.images for m in messages):
        raise SkippedRow("an assistant turn holds an image, which cannot be learned")
    return messages


# messages (TRL / OpenAI) -------------------------------------------------------------------------
_MESSAGES_ROLES: dict[str, Role] = {
    "system": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "user",
}


def _bare(item: JSON) -> bool:
    """``{"type": "image"}`` without a source: a placeholder for the row's next image."""
    return (
        isinstance(item, Mapping)
        and item.get("type") == "image"
        and not (item.get("image") or item.get("path"))
    )


def _messages_parts(content: str | list[JSON], images: Iterator[JSON], where: RowSource) -> list[Part]:
    if isinstance(content, str):
        return [TextPart(content)]
    parts: list[Part] = []
    for item in content:
        if not isinstance(item, Mapping):
            raise SkippedRow(f"unsupported content part {item!r:.60}")
        kind = item.get("type")
        if kind == "text":
            parts.append(TextPart(str(item.get("text", ""))))
        elif _bare(item):
            parts.append(resolve_image(next(images), where))
        elif kind == "image":
            parts.append(resolve_image(item.get("image") or item.get("path"), where))
        elif kind == "image_url":
            url = item.get("image_url")
            parts.append(resolve_image(url.get("url") if isinstance(url, Mapping) else url, where))
        else:
            raise SkippedRow(f"unsupported content part {item!r:.60}")
    return parts


def _checked_messages(row: Mapping[str, JSON]) -> list[tuple[Role, str | list[JSON]]]:
    """Each message's role and content, once every message has a known role and a string or a
    list of parts as content."""
    messages = row.get("messages")
    if not isinstance(messages, list):
        raise SkippedRow("no 'messages' list")
    checked: list[tuple[Role, str | list[JSON]]] = []
    for m in messages:
        role = m.get("role") if isinstance(m, Mapping) else None
        if not isinstance(m, Mapping) or not isinstance(role, str) or role not in _MESSAGES_ROLES:
            raise SkippedRow(f"message {m!r:.60} has no role of system, user, assistant or tool")
        if m.get("tool_calls"):
            raise SkippedRow("a message has tool_calls; write the call into the assistant's content")
        content = m.get("content", "")
        if not isinstance(content, (str, list)):
            raise SkippedRow(f"message content must be a string or a list of parts, got {content!r:.40}")
        checked.append((_MESSAGES_ROLES[role], content))
    return checked


def read_messages_row(row: Mapping[str, JSON], where: RowSource) -> list[Message]:
    """A TRL/OpenAI ``messages`` row as a conversation; ``SkippedRow`` when it cannot be trained on."""
    messages, images = _checked_messages(row), _row_images(row)
    bare = sum(_bare(p) for _, content in messages if isinstance(content, list) for p in content)
    if bare != len(images):
        raise SkippedRow(f"{bare} image placeholders but {len(images)} images")
    queue = iter(images)
    out = [Message(role, tuple(_messages_parts(content, queue, where))) for role, content in messages]
    return _conversation(out)


def _claims_messages(row: Mapping[str, JSON]) -> bool:
    messages = row.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, Mapping) and isinstance(m.get("content"), list) for m in messages
    )


# ShareGPT (LLaMA-Factory) ------------------------------------------------------------------------
# LLaMA-Factory's role tags: human/observation on the user side, gpt/function_call learned;
# the OpenAI spelling (user/assistant/tool) is its "messages" variant of the same format
_USER_SIDE = {"human": "user", "user": "user", "observation": "user", "tool": "user"}
_ASSISTANT_SIDE = {"gpt": "assistant", "assistant": "assistant", "function_call": "assistant"}


def _turn(m: JSON) -> tuple[str, JSON]:
    if not isinstance(m, Mapping):
        raise SkippedRow(f"turn {m!r:.60} is not an object")
    return str(m.get("from", m.get("role", ""))), m.get("value", m.get("content"))


def _split_images(text: str, images: Iterator[ImagePart]) -> list[Part]:
    parts: list[Part] = []
    for i, piece in enumerate(text.split(IMAGE_TOKEN)):
        if i:
            parts.append(next(images))
        if piece:
            parts.append(TextPart(piece))
    return parts


def _turn_texts(turns: list[tuple[str, JSON]]) -> list[str]:
    """The text of each turn, once the turns alternate user side and assistant side and end on
    the assistant side, as LLaMA-Factory requires."""
    if not turns:
        raise SkippedRow("no assistant turn to learn from")
    texts = []
    for i, (tag, value) in enumerate(turns):
        side = _USER_SIDE if i % 2 == 0 else _ASSISTANT_SIDE
        if tag not in side:
            expected = "human/observation" if i % 2 == 0 else "gpt/function_call"
            raise SkippedRow(f"turn {i + 1} is {tag!r} where a {expected} turn belongs")
        if not isinstance(value, str):
            raise SkippedRow(f"turn {i + 1} has no text value")
        texts.append(value)
    if len(turns) % 2:
        ended = (
            "no assistant turn to learn from" if len(turns) == 1 else "the last turn is not an assistant turn"
        )
        raise SkippedRow(f"{ended} (LLaMA-Factory needs user/assistant pairs)")
    return texts


def read_sharegpt_row(row: Mapping[str, JSON], where: RowSource) -> list[Message]:
    """A LLaMA-Factory ShareGPT row as a conversation; ``SkippedRow`` when LLaMA-Factory would
    refuse it (a role out of turn, no closing assistant turn, ``<image>`` count != images)."""
    listed = row.get("conversations", row.get("messages"))
    if not isinstance(listed, list):
        raise SkippedRow("no 'conversations' or 'messages' list")
    turns = [_turn(m) for m in listed]
    system: JSON = row.get("system") or ""
    if turns and turns[0][0] == "system":
        system, turns = turns[0][1], turns[1:]
    texts = _turn_texts(turns)
    refs = _row_images(row)
    placeholders = sum(text.count(IMAGE_TOKEN) for text in texts)
    if placeholders != len(refs):
        raise SkippedRow(f"{placeholders} {IMAGE_TOKEN} placeholders but {len(refs)} images")
    images = iter([resolve_image(ref, where) for ref in refs])
    out = [Message.text("system", str(system))] if system else []
    for i, text in enumerate(texts):
        role: Role = "user" if i % 2 == 0 else "assistant"
        out.append(Message(role, tuple(_split_images(text, images))))
    return _conversation(out)


def _claims_sharegpt(row: Mapping[str, JSON]) -> bool:
    if isinstance(row.get("conversations"), list):
        return True
    messages = row.get("messages")
    if not isinstance(messages, list):
        return False
    turns = [m for m in messages if isinstance(m, Mapping)]
    if len(turns) != len(messages):
        return False
    if any("from" in m or "value" in m for m in turns):
        return True
    texts = [t for m in turns if isinstance(t := m.get("content"), str)]
    strings = len(texts) == len(turns)
    return strings and (bool(_row_images(row)) or any(IMAGE_TOKEN in t for t in texts))


SFT_FORMATS.add("messages", SFTFormat("messages", _claims_messages, read_messages_row))
SFT_FORMATS.add("sharegpt", SFTFormat("sharegpt", _claims_sharegpt, read_sharegpt_row))
