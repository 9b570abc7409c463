"""SFT data files: what ``evidra train sft --data FILE`` reads, one JSON row a line.

Three formats, detected per file or named (``data.trajectories_format``, ``--data-format``):
``messages`` (TRL / OpenAI) and ``sharegpt`` (LLaMA-Factory), see ``evidra.rl.sft.formats``, and
``evidra``, the JSONL that ``evidra data distill`` writes: one row per sample, ``{"id",
"accepted", "prompt", "response", ...}`` where ``prompt`` is the chat without the assistant turn
(``[{"role", "content": [{"type": "text", "text"} | {"type": "image", "image": PATH}]}]``) and
``response`` the assistant text to learn, or, for a multi-turn episode, ``conversation``: the
whole chat (prompt, assistant turns and observations) in the same JSON form. Rejected rows stay
in the file (a rerun skips their ids) and are not trained on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evidra.core.errors import ConfigError
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.types import Message, messages_from_json
from evidra.rl.sft.formats import SFT_FORMATS, RowSource, SFTFormat, SkippedRow
from evidra.safeio.jsonfiles import read_json_lines

logger = logging.getLogger(__name__)


def read_evidra_row(row: Mapping[str, JSON], where: RowSource) -> list[Message] | None:
    """An ``evidra data distill`` row: ``None`` when rejected; a malformed row is a ``ConfigError``
    (evidra wrote it); a row whose image is gone is skipped. Paths are used as written."""
    if not row.get("accepted"):
        return None
    try:
        if "conversation" in row:  # a multi-turn episode (``evidra data multiexpert``)
            messages = messages_from_json(row["conversation"])
        else:
            messages = [*messages_from_json(row["prompt"]), Message.text("assistant", str(row["response"]))]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            f"data.trajectories: {str(where.file)!r} line {where.line} is no trajectory row "
            f"({type(exc).__name__}: {exc})"
        ) from None
    for image in (i for m in messages for i in m.images):
        if not Path(str(image.image)).is_file():
            raise SkippedRow(f"image file {str(image.image)!r} does not exist")
    return messages


SFT_FORMATS.add(
    "evidra", SFTFormat("evidra", lambda row: "prompt" in row and "response" in row, read_evidra_row)
)


@dataclass(frozen=True)
class SFTData:
    """The conversations of an SFT data file and what reading it counted."""

    path: str
    format: str
    conversations: tuple[tuple[Message, ...], ...]
    rows: int  # non-blank lines
    skipped: int  # rows refused with a warning (image missing, placeholder count, no assistant turn...)
    unused: int = 0  # rows kept in the file but not for training (rejected distillation rows)

    def summary(self) -> str:
        """One line: how many conversations came from how many rows.

        >>> SFTData("a.jsonl", "sharegpt", (), rows=3, skipped=1, unused=0).summary()
        'a.jsonl (sharegpt): 0 conversations from 3 rows, 1 skipped'
        """
        unused = f", {self.unused} not accepted" if self.unused else ""
        counts = f"{len(self.conversations)} conversations from {self.rows} rows, {self.skipped} skipped"
        return f"{self.path} ({self.format}): {counts}{unused}"


def _json_rows(path: Path) -> list[tuple[int, JSONObject]]:
    rows = []
    for n, row in read_json_lines(path, "data.trajectories", ConfigError):
        if not isinstance(row, dict):
            raise ConfigError(f"data.trajectories: {str(path)!r} line {n} is not a JSON object")
        rows.append((n, row))
    return rows


def detect_format(rows: Sequence[Mapping[str, JSON]], path: str = "") -> str:
    """The format of a file's rows: the first format (in the order evidra, sharegpt, messages)
    that claims a row; text-only ``messages`` rows with string contents read alike as TRL or
    LLaMA-Factory rows and count as ``messages``.

    >>> detect_format([{"conversations": [{"from": "human", "value": "<image>Hi"}]}])
    'sharegpt'
    >>> detect_format([{"messages": [{"role": "user", "content": "Hi"}]}])
    'messages'
    """
    order = ("evidra", "sharegpt", "messages")
    for row in rows:
        for name in order:
            if SFT_FORMATS.get(name).claims(row):
                return name
    if rows and all(isinstance(r.get("messages"), list) for r in rows):
        return "messages"
    keys = ", ".join(sorted(rows[0])) if rows else "(no rows)"
    raise ConfigError(
        f"data.trajectories: cannot tell the format of {path!r} (first row's keys: {keys}); expected "
        "'messages' (TRL), 'conversations' (ShareGPT) or 'prompt'/'response' (evidra data distill), "
        "or pass --data-format"
    )


def read_sft_data(path: str | Path, fmt: str = "auto") -> SFTData:
    """The conversations of an SFT JSONL file in format ``fmt`` (``auto``: detected).

    A row that cannot be trained on is skipped with one warning naming the file and line; a
    file left with no conversation is a ``ConfigError``.
    """
    file = Path(path)
    numbered = _json_rows(file)
    name = detect_format([r for _, r in numbered], str(path)) if fmt == "auto" else fmt
    reader = SFT_FORMATS.get(name).read
    out: list[tuple[Message, ...]] = []
    skipped = unused = 0
    for n, row in numbered:
        try:
            conversation = reader(row, RowSource(file, n))
        except SkippedRow as exc:
            logger.warning("%s line %d skipped: %s", path, n, exc)
            skipped += 1
            continue
        if conversation is None:
            unused += 1
        else:
            out.append(tuple(conversation))
    data = SFTData(str(path), name, tuple(out), len(numbered), skipped, unused)
    if not out and name == "evidra" and not skipped:
        raise ConfigError(f"data.trajectories: {str(path)!r} has no accepted trajectory to train on")
    if not out:
        raise ConfigError(
            f"data.trajectories: {str(path)!r} has no row to train on as {name!r} data ({data.summary()}; "
            "the warnings above say why); check the rows or --data-format"
        )
    logger.info("SFT data %s", data.summary())
    return data
