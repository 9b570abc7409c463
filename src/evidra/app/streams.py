"""An answer as a stream of events: the pages found, each piece of text, then the answer.

The model writes on its own thread; ``answer_events`` hands its pieces to the event loop as
they come and yields them in order. When the reader leaves (the async iterator is closed), the
next piece the model makes raises ``StreamCancelled`` on its thread, which stops generation.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import EvidraError
from evidra.core.jsonvalue import JSONObject
from evidra.models.streaming import StreamCancelled

if TYPE_CHECKING:
    from evidra.app.workspace import AskTicket, Workspace
    from evidra.core.types import Message, Page
    from evidra.rag import Answer
    from evidra.retrieval.interfaces import Hit


@dataclass(frozen=True)
class Found:
    pages: tuple[tuple[Hit, Page], ...]
    ms: float  # since the question arrived


@dataclass(frozen=True)
class Piece:
    text: str
    ms: float


@dataclass(frozen=True)
class Done:
    answer: Answer
    ms: float


@dataclass(frozen=True)
class Failed:
    message: str


Event = Found | Piece | Done | Failed
_RUNNING: set[asyncio.Task[None]] = set()


async def answer_events(
    workspace: Workspace,
    question: str,
    k: int,
    history: Sequence[Message] = (),
    ticket: AskTicket | None = None,
) -> AsyncIterator[Event]:
    """``Found``, then ``Piece``s, then ``Done`` (or ``Failed`` with a one-line message); ``history``
    holds the earlier turns of the conversation, ``ticket`` the place ``Workspace.admit`` gave the
    question (``Workspace.ask``)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[Event | None] = asyncio.Queue()
    gone = threading.Event()
    start = time.perf_counter()

    def ms() -> float:
        return round((time.perf_counter() - start) * 1e3, 1)

    def put(event: Event | None) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, event)

    def on_text(piece: str) -> None:  # on the model thread
        if gone.is_set():
            raise StreamCancelled
        put(Piece(piece, ms()))

    def on_pages(found: list[tuple[Hit, Page]]) -> None:
        queue.put_nowait(Found(tuple(found), ms()))

    async def run() -> None:
        try:
            answer = await workspace.ask(
                question, k, on_text, on_pages=on_pages, history=history, ticket=ticket
            )
            queue.put_nowait(Done(answer, ms()))
        except StreamCancelled:
            pass
        except EvidraError as exc:
            queue.put_nowait(Failed(str(exc)))
        finally:
            put(None)

    task = asyncio.create_task(run())
    _RUNNING.add(task)  # runs to its end even when the reader leaves (the model stops at its next piece)
    task.add_done_callback(_RUNNING.discard)
    try:
        while (event := await queue.get()) is not None:
            yield event
    finally:
        gone.set()


Report = Callable[[JSONObject], None]


async def progress_events(
    work: Callable[[Report], Awaitable[JSONObject]],
) -> AsyncIterator[JSONObject]:
    """The progress records ``work`` reports (from any thread) as they come, then its result."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[JSONObject | None] = asyncio.Queue()

    def report(record: JSONObject) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, record)

    async def run() -> None:
        try:
            queue.put_nowait(await work(report))
        except EvidraError as exc:
            queue.put_nowait({"type": "error", "error": str(exc)})
        finally:
            loop.call_soon_threadsafe(queue.put_nowait, None)

    task = asyncio.create_task(run())
    _RUNNING.add(task)
    task.add_done_callback(_RUNNING.discard)
    while (record := await queue.get()) is not None:
        yield record
