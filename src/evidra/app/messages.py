"""Chat messages as clients send them (OpenAI's shape), checked: the question and its history.

``conversation(messages, options)`` reads a ``/v1/chat/completions`` message list: the last
message must be the user's question; the user and assistant messages before it are the history
(``evidra.core.conversation`` says how retrieval and the model use it). ``history_of`` reads the
``history`` of ``POST /api/ask``, the same list without the question.

* **System** (and ``developer``) messages are checked and left out: the paradigm's own prompt
  fixes the format that evidence is parsed from, and a front end's "You are a helpful
  assistant" must not replace it.
* **Content** is a string or a list of ``{"type": "text", "text": ...}`` parts. An image, audio
  or file part is refused: answers come from the store's pages. So is any other role (``tool``,
  ``function``) and an assistant message without text (a tool call).
* **Caps**: at most ``max_messages`` messages and ``max_chat_chars`` characters in all; the
  question at most ``max_question_chars``.

Every refusal is an ``HttpError`` 400 (413 for a question over its cap) with one line that
names the message by its 1-based position.

>>> question, history = conversation(
...     [{"role": "user", "content": "How fast is the Heron valve?"},
...      {"role": "assistant", "content": "12 bar."},
...      {"role": "user", "content": [{"type": "text", "text": "What does it return?"}]}], ServeOptions())
>>> question, [(m.role, m.plain_text) for m in history]
('What does it return?', [('user', 'How fast is the Heron valve?'), ('assistant', '12 bar.')])
"""

from __future__ import annotations

from evidra.app.http import ServeOptions, question_of
from evidra.core.types import Message
from evidra.http.server_limits import HttpError

IGNORED = ("system", "developer")  # read for their shape, then left to the paradigm's own prompt
TURNS = ("user", "assistant")


def _text(i: int, message: object) -> tuple[str, str]:
    """The role and text of message ``i`` (1-based), or a 400 naming what is wrong with it."""
    if not isinstance(message, dict):
        raise HttpError(400, f'message {i} is not an object; send {{"role": "user", "content": "..."}}')
    role, content = message.get("role"), message.get("content")
    if role not in (*TURNS, *IGNORED):
        shown = repr(role)[:40]
        raise HttpError(400, f"message {i} has role {shown}; send system, user and assistant messages")
    if isinstance(content, list):
        content = "\n".join(_part_text(i, part) for part in content)
    if not isinstance(content, str):
        raise HttpError(400, f"message {i} ({role}) has no text content; send a string or text parts")
    if any(0xD800 <= ord(c) <= 0xDFFF for c in content):
        raise HttpError(400, f"message {i} holds a lone surrogate; send valid UTF-8 text")
    return str(role), content


def _part_text(i: int, part: object) -> str:
    kind, text = (part.get("type"), part.get("text")) if isinstance(part, dict) else (None, None)
    if kind == "text" and isinstance(text, str):
        return text
    if isinstance(kind, str) and kind != "text":
        raise HttpError(
            400,
            f"message {i} holds a part of type {kind[:40]!r}; answers come from the pages: send text",
        )
    raise HttpError(400, f'message {i} holds a malformed part; send {{"type": "text", "text": "..."}}')


def _turns(messages: object, options: ServeOptions, what: str) -> list[tuple[str, str]]:
    if not isinstance(messages, list):
        raise HttpError(400, f"{what} must be a list of chat messages")
    if len(messages) > options.max_messages:
        raise HttpError(400, f"{what} holds {len(messages)} messages, over the cap of {options.max_messages}")
    turns = [_text(i, m) for i, m in enumerate(messages, 1)]
    total = sum(len(text) for _, text in turns)
    if total > options.max_chat_chars:
        raise HttpError(400, f"{what} holds {total} characters, over the cap of {options.max_chat_chars}")
    return turns


def _history(turns: list[tuple[str, str]]) -> tuple[Message, ...]:
    return tuple(Message.text("user" if r == "user" else "assistant", t) for r, t in turns if r in TURNS)


def conversation(messages: object, options: ServeOptions) -> tuple[str, tuple[Message, ...]]:
    """The last user message's text and the user and assistant turns before it (oldest first)."""
    turns = _turns(messages, options, "messages")
    spoken = [(i, role) for i, (role, _) in enumerate(turns, 1) if role in TURNS]
    if not spoken:
        raise HttpError(400, "messages hold no user message to answer")
    last, role = spoken[-1]
    if role != "user":
        raise HttpError(400, f"message {last} is the assistant's; end the messages with the user's question")
    return question_of(turns[last - 1][1], options), _history(turns[: last - 1])


def history_of(value: object, options: ServeOptions) -> tuple[Message, ...]:
    """The ``history`` of ``POST /api/ask`` (absent: none), checked like ``conversation``'s."""
    if value is None:
        return ()
    return _history(_turns(value, options, "history"))
