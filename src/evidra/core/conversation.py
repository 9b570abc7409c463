"""A question that follows up on earlier turns: what retrieval searches for, what the model reads.

A follow-up ("and what about page 3?", "what does it return?") means little on its own, so an
answer in a conversation uses the earlier turns twice:

* **Retrieval** searches for ``retrieval_query(question, history)``: the question, then the
  earlier *user* turns, most recent first, until ``QUERY_CHARS`` characters in all (the question
  itself is always whole; a long question leaves no room, and the last turn that fits is cut at a
  word). The assistant's earlier answers are left out: they repeat the pages of their own turn,
  and a page is found again when the user's words still point to it.
* **The model** reads the earlier turns as chat messages between the paradigm's system message
  (if any) and its prompt for this question, which shows this turn's pages: ``with_history``.
  Only text travels: earlier pages are not shown again, so the prompt stays the paradigm's own.
  ``recent`` keeps the newest turns within ``HISTORY_CHARS`` characters (an older turn is dropped
  whole; the newest is cut to its start when it alone is longer) and starts on a user turn.

History is a sequence of ``Message`` of roles ``user`` and ``assistant`` holding text only;
``check_history`` refuses anything else with one line.

>>> history = [Message.text("user", "How fast is the Heron valve?"), Message.text("assistant", "12 bar.")]
>>> retrieval_query("And what does it return?", history)
'And what does it return?\\nHow fast is the Heron valve?'
>>> [m.role for m in with_history([Message.text("system", "s"), Message.text("user", "q")], history)]
['system', 'user', 'assistant', 'user']
"""

from __future__ import annotations

from collections.abc import Sequence

from evidra.core.errors import InvalidInputError
from evidra.core.types import Message, TextPart

QUERY_CHARS = 1000  # the retrieval query: the question, then earlier user turns up to this many characters
HISTORY_CHARS = 8000  # earlier turns shown to the model (about 2,000 tokens)
MAX_TURNS = 64  # earlier turns a history may hold


def check_history(history: Sequence[Message]) -> tuple[Message, ...]:
    """``history`` as a tuple, refused unless it is at most ``MAX_TURNS`` text-only user and
    assistant messages."""
    turns = tuple(history)
    if len(turns) > MAX_TURNS:
        raise InvalidInputError(f"a history of {len(turns)} turns is over the cap of {MAX_TURNS}; send fewer")
    for i, turn in enumerate(turns, 1):
        if not isinstance(turn, Message) or turn.role not in ("user", "assistant"):
            role = turn.role if isinstance(turn, Message) else type(turn).__name__
            raise InvalidInputError(
                f"history turn {i} is a {role!r}; a history holds user and assistant turns"
            )
        if any(not isinstance(p, TextPart) for p in turn.content):
            raise InvalidInputError(f"history turn {i} holds an image; earlier turns travel as text only")
    return turns


def retrieval_query(question: str, history: Sequence[Message], max_chars: int = QUERY_CHARS) -> str:
    """The question, then the earlier user turns, most recent first, within ``max_chars``."""
    parts = [question]
    room = max_chars - len(question)
    for turn in reversed(check_history(history)):
        text = " ".join(turn.plain_text.split()) if turn.role == "user" else ""
        if len(text) + 1 > room:
            text = _cut(text, room - 1)
        if text:
            parts.append(text)
            room -= len(text) + 1
        if room < 2:
            break
    return "\n".join(parts)


def _cut(text: str, n: int) -> str:
    """At most ``n`` characters of ``text``, ending at a word's end where one is in reach."""
    if len(text) <= n:
        return text
    head = text[: max(n, 0)]
    if text[len(head)] != " ":  # the cut falls inside a word: end at the word before
        head = head.rsplit(" ", 1)[0] if " " in head else ""
    return head.strip()


def recent(history: Sequence[Message], max_chars: int = HISTORY_CHARS) -> tuple[Message, ...]:
    """The newest turns of ``history`` whose text fits in ``max_chars``, starting on a user turn."""
    kept: list[Message] = []
    room = max_chars
    for turn in reversed(check_history(history)):
        text = turn.plain_text
        if not text.strip():
            continue
        if len(text) > room:
            if not kept:  # the newest turn alone is longer than the cap: keep its start
                kept.append(Message.text(turn.role, text[:room]))
            break
        kept.append(turn)
        room -= len(text)
    kept.reverse()
    while kept and kept[0].role != "user":
        kept.pop(0)
    return tuple(kept)


def with_history(chat: Sequence[Message], history: Sequence[Message]) -> list[Message]:
    """``chat`` (a paradigm's messages for this turn) with ``history`` after its system messages."""
    turns = check_history(history)
    head = 0
    while head < len(chat) and chat[head].role == "system":
        head += 1
    return [*chat[:head], *turns, *chat[head:]]
