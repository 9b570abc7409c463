"""SFT trajectory files: the JSONL that ``evidra data distill`` writes and ``train sft --data`` reads.

One row per sample: ``{"id", "accepted", "prompt", "response", ...}`` where ``prompt`` is the
chat without the assistant turn (``[{"role", "content": [{"type": "text", "text"} |
{"type": "image", "image": PATH}]}]``) and ``response`` the assistant text to learn. Rejected
rows stay in the file (a rerun skips their ids) and are not trained on.
"""

from __future__ import annotations

import json
from pathlib import Path

from evidra.errors import ConfigError
from evidra.types import Message, messages_from_json


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
