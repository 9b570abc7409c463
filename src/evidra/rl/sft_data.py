"""SFT trajectory files: the JSONL that ``evidra data distill`` writes and ``train sft --data`` reads.

One row per sample: ``{"id", "accepted", "prompt", "response", ...}`` where ``prompt`` is the
chat without the assistant turn (``[{"role", "content": [{"type": "text", "text"} |
{"type": "image", "image": PATH}]}]``) and ``response`` the assistant text to learn. Rejected
rows stay in the file (a rerun skips their ids) and are not trained on.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evidra.errors import ConfigError
from evidra.types import ImagePart, Message, Part, TextPart


def _part_json(part: Part) -> dict[str, str]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {"type": "image", "image": str(part.image)}


def messages_to_json(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as JSON, images by path (not inlined).

    >>> messages_to_json([Message.text("user", "hi")])
    [{'role': 'user', 'content': [{'type': 'text', 'text': 'hi'}]}]
    """
    return [{"role": m.role, "content": [_part_json(p) for p in m.content]} for m in messages]


def _part(item: dict[str, Any]) -> Part:
    if item["type"] == "text":
        return TextPart(str(item["text"]))
    if item["type"] == "image":
        return ImagePart(str(item["image"]))
    raise ValueError(f"unknown part type {item['type']!r}")


def messages_from_json(rows: Sequence[dict[str, Any]]) -> list[Message]:
    """The inverse of ``messages_to_json``."""
    return [Message(r["role"], tuple(_part(p) for p in r["content"])) for r in rows]


def read_trajectories(path: str | Path) -> list[list[Message]]:
    """The accepted rows of a trajectory file as SFT conversations (prompt + assistant response).

    A line that does not parse, or a row without ``prompt``/``response``, is a ``ConfigError``
    naming the file and line; a file with no accepted row is one too.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"data.trajectories: cannot read {str(path)!r}: {exc}") from None
    out: list[list[Message]] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if not row.get("accepted"):
                continue
            out.append([*messages_from_json(row["prompt"]), Message.text("assistant", str(row["response"]))])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(
                f"data.trajectories: {str(path)!r} line {n} is no trajectory row "
                f"({type(exc).__name__}: {exc})"
            ) from None
    if not out:
        raise ConfigError(f"data.trajectories: {str(path)!r} has no accepted trajectory to train on")
    return out
