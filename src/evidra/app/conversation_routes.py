"""The app's kept conversations over HTTP (stored by ``evidra.corpus.conversations``).

``GET /api/conversations`` lists them, newest first; ``GET /api/conversations/<id>`` gives one
with every turn in the shape of ``/api/ask``'s answer event (``evidra.app.history``);
``DELETE /api/conversations/<id>`` removes one; ``GET /api/conversations/<id>/turns/<turn>/export
?format=html|md`` downloads one answer with its evidence (crops inside the file). ``/api/ask``
keeps each answer with ``keep``: in the conversation its body names, else in a new one.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from evidra.app.errors import NotFound
from evidra.app.history import conversation_json, export_html, export_markdown, kept_turn, shown_steps
from evidra.core.jsonvalue import JSONObject
from evidra.corpus.conversations import Conversation, Turn, checked_id

if TYPE_CHECKING:
    from evidra.app.workspace import Workspace
    from evidra.core.types import Page
    from evidra.corpus.conversations import Conversations
    from evidra.corpus.store import PageStore
    from evidra.rag import Answer

EXPORTS = {"html": "text/html; charset=utf-8", "md": "text/markdown; charset=utf-8"}


def _pages(store: PageStore, ids: Iterable[str], *, with_words: bool = False) -> dict[str, Page]:
    return {pid: store.get(pid, with_words=with_words) for pid in dict.fromkeys(ids) if pid in store}


def _named(kept: Conversations, conversation_id: str) -> Conversation:
    try:
        return kept.get(conversation_id)
    except KeyError:
        raise NotFound(f"no conversation {conversation_id!r}; it was deleted, or start a new one") from None


def _cited_ids(conversation: Conversation) -> list[str]:
    ids = []
    for turn in conversation.turns:
        ids += [*turn.page_ids, *(c.page_id for c in turn.cited if c.page_id)]
    return ids


async def check_conversation(workspace: Workspace, value: object) -> str | None:
    """The conversation id a request names (None: a new one), refused unless it is kept."""
    if value is None:
        return None
    cid = checked_id(value)

    def known(store: PageStore, kept: Conversations) -> str:
        _named(kept, cid)
        return cid

    return await workspace.with_kept(known)


async def keep(workspace: Workspace, conversation_id: str | None, answer: Answer) -> tuple[str, str]:
    """Keep ``answer`` in the conversation (a new one when None); its id and the turn's."""
    turn = kept_turn(answer)

    def add(store: PageStore, kept: Conversations) -> str:
        try:
            return kept.add(conversation_id, turn)
        except KeyError:
            raise NotFound(f"no conversation {conversation_id!r}; it was deleted meanwhile") from None

    return await workspace.with_kept(add), turn.id


def _turn(conversation: Conversation, turn_id: str) -> Turn:
    for turn in conversation.turns:
        if turn.id == turn_id:
            return turn
    raise NotFound(f"conversation {conversation.id!r} has no answer {turn_id!r}")


def conversation_routes(workspace: Workspace) -> list[Route]:
    """The routes of the module docstring."""

    async def listed(request: Request) -> Response:
        summaries = await workspace.with_kept(lambda store, kept: kept.summaries())
        rows = [
            {"id": s.id, "title": s.title, "created": s.created, "updated": s.updated, "turns": s.turns}
            for s in summaries
        ]
        return JSONResponse({"conversations": rows})

    async def one(request: Request) -> Response:
        cid = checked_id(request.path_params["conversation_id"])

        def read(store: PageStore, kept: Conversations) -> JSONObject:
            conversation = _named(kept, cid)
            return conversation_json(conversation, _pages(store, _cited_ids(conversation)))

        return JSONResponse(await workspace.with_kept(read), headers={"Cache-Control": "no-store"})

    async def delete(request: Request) -> Response:
        cid = checked_id(request.path_params["conversation_id"])
        if not await workspace.with_kept(lambda store, kept: kept.delete(cid)):
            raise NotFound(f"no conversation {cid!r}")
        return JSONResponse({"deleted": cid})

    async def export(request: Request) -> Response:
        cid = checked_id(request.path_params["conversation_id"])
        tid = checked_id(request.path_params["turn_id"], "answer")
        kind = request.query_params.get("format", "html")
        if kind not in EXPORTS:
            raise NotFound(f"no export format {kind[:20]!r}; use format=html or format=md")

        def write(store: PageStore, kept: Conversations) -> str:
            conversation = _named(kept, cid)
            turn = _turn(conversation, tid)
            pages = _pages(store, [c.page_id for c in turn.cited if c.page_id], with_words=True)
            steps = shown_steps(turn, pages, lambda page: workspace.image_of(page).path)
            if kind == "md":
                return export_markdown(turn, steps)
            return export_html(turn, steps, conversation.title)

        text = await workspace.with_kept(write)
        name = f"evidra-answer-{tid[:8]}.{kind}"
        headers = {"Content-Disposition": f'attachment; filename="{name}"', "Cache-Control": "no-store"}
        return Response(text, media_type=EXPORTS[kind], headers=headers)

    base = "/api/conversations/{conversation_id}"
    return [
        Route("/api/conversations", listed, methods=["GET"]),
        Route(base, one, methods=["GET"]),
        Route(base, delete, methods=["DELETE"]),
        Route(base + "/turns/{turn_id}/export", export, methods=["GET"]),
    ]
