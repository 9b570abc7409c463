"""Kept answers as the app shows and exports them (the tables: ``evidra.corpus.conversations``).

``kept_turn`` turns an ``Answer`` into the record that is stored (page ids, boxes, and each box
grown to whole lines); ``turn_json`` gives a stored turn back in the shape of ``/api/ask``'s
answer event, so the page draws a reopened answer as it drew a new one, every label read from
the page store, never from the record. ``export_html`` writes one answer with its evidence as a
single HTML file (the crops inside it as ``data:`` URIs, no script, a policy that allows none);
``export_markdown`` as Markdown with the same crops as ``data:`` URIs, every model-written
string escaped so that it reads as text in any Markdown viewer.
"""

from __future__ import annotations

import base64
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.app.citations import citation_label, evidence, page_json
from evidra.app.crops import crop_frame, crop_png
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.types import Box, Page
from evidra.corpus.conversations import Cited, Conversation, Turn

if TYPE_CHECKING:
    from pathlib import Path

    from evidra.rag import Answer

MAX_EXPORT_CROPS = 16  # crops in one exported answer
STEP_COLORS = ("#2563eb", "#db2777", "#ea580c", "#7c3aed", "#0891b2", "#65a30d", "#b45309")
ANSWER_COLOR = "#16a34a"


def kept_turn(answer: Answer) -> Turn:
    """The record of ``answer`` that a conversation keeps."""
    cited = tuple(
        Cited(
            e.step,
            e.text,
            e.page_id,
            e.box.as_tuple() if e.box is not None else None,
            e.crop.as_tuple() if e.crop is not None else None,
        )
        for e in evidence(answer)
    )
    return Turn(
        id=uuid.uuid4().hex,
        created=time.time(),
        question=answer.question,
        answer=answer.text,
        no_hits=answer.no_hits,
        output=answer.output,
        errors=tuple(answer.errors),
        finish_reason=answer.finish_reason,
        cited=cited,
        page_ids=tuple(p.id for p in answer.pages),
    )


def _box(coords: tuple[float, float, float, float] | None, page: Page | None) -> Box | None:
    """A stored box, if it lies on ``page`` (a record may claim any numbers)."""
    if coords is None or page is None:
        return None
    x1, y1, x2, y2 = coords
    if x1 < 0 or y1 < 0 or x2 > page.width + 1 or y2 > page.height + 1:
        return None
    return Box(x1, y1, x2, y2)


def _box_json(box: Box | None) -> list[JSON] | None:
    return [round(c, 1) for c in box.as_tuple()] if box is not None else None


def _cited_json(c: Cited, pages: Mapping[str, Page]) -> JSONObject:
    page = pages.get(c.page_id) if c.page_id else None
    box = _box(c.box, page)
    return {
        "step": c.step,
        "text": c.text,
        "page_id": page.id if page else None,
        "label": citation_label(page) if page else "",
        "document": page.source if page else "",
        "page": page.page_number if page else None,
        "box": _box_json(box),
        "crop": _box_json(_box(c.crop, page) or box),
    }


def turn_json(turn: Turn, pages: Mapping[str, Page]) -> JSONObject:
    """A stored turn as ``/api/ask``'s answer event has it; ``pages`` are the store's pages it
    names (a page no longer in the store is left out, its citations kept without a box)."""
    from evidra.rag_view import NO_HITS

    return {
        "turn": turn.id,
        "created": turn.created,
        "question": turn.question,
        "answer": turn.answer,
        "parsed": turn.answer is not None,
        "no_hits": turn.no_hits,
        "notice": NO_HITS if turn.no_hits else "",
        "evidence": [_cited_json(c, pages) for c in turn.cited],
        "pages": [page_json(pages[pid]) for pid in turn.page_ids if pid in pages],
        "errors": list(turn.errors),
        "finish_reason": turn.finish_reason,
        "output": turn.output,
    }


def conversation_json(conversation: Conversation, pages: Mapping[str, Page]) -> JSONObject:
    return {
        "id": conversation.id,
        "title": conversation.title,
        "created": conversation.created,
        "updated": conversation.updated,
        "turns": [turn_json(t, pages) for t in conversation.turns],
    }


@dataclass(frozen=True)
class Shown:
    """One cited step of an exported answer: its tag, colour, text, label and crop (PNG bytes)."""

    tag: str
    color: str
    text: str
    label: str
    png: bytes | None

    @property
    def data_uri(self) -> str:
        return "data:image/png;base64," + base64.b64encode(self.png or b"").decode("ascii")


def shown_steps(turn: Turn, pages: Mapping[str, Page], image: Callable[[Page], Path]) -> list[Shown]:
    """The cited steps of ``turn`` with their crops cut from the page images (at most
    ``MAX_EXPORT_CROPS`` crops; the others are named without one)."""
    out: list[Shown] = []
    for c in turn.cited:
        page = pages.get(c.page_id) if c.page_id else None
        box = _box(c.box, page)
        png = None
        if page is not None and box is not None and len([s for s in out if s.png]) < MAX_EXPORT_CROPS:
            frame = _box(c.crop, page) or crop_frame(box, page.words, page.width, page.height)
            png = crop_png(image(page), frame, box, _color(c.step))
        tag = "A" if c.step == 0 else str(c.step)
        text = f"Answer: {c.text}" if c.step == 0 else c.text
        label = citation_label(page) if page else "cites no page of the store"
        out.append(Shown(tag, _color(c.step), text, label, png))
    return out


def _color(step: int) -> str:
    return ANSWER_COLOR if step == 0 else STEP_COLORS[(step - 1) % len(STEP_COLORS)]


def _headline(turn: Turn) -> str:
    from evidra.rag import UNREADABLE
    from evidra.rag_view import NO_HITS

    if turn.answer is not None:
        return turn.answer
    return NO_HITS if turn.no_hits else UNREADABLE


def export_html(turn: Turn, steps: list[Shown], title: str) -> str:
    """One answer with its evidence as a self-contained HTML file (no script, crops inside)."""
    from evidra.core.templating import render

    return render(
        "app/export.html.j2",
        title=title,
        question=turn.question,
        headline=_headline(turn),
        parsed=turn.answer is not None,
        output=turn.output,
        steps=steps,
        when=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(turn.created)),
    )


_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def md_text(text: str) -> str:
    """``text`` as Markdown that shows it literally: HTML and Markdown syntax escaped.

    >>> md_text("<img src=x onerror=alert(1)> **bold** [link](javascript:x)")
    '&lt;img src=x onerror=alert\\\\(1\\\\)&gt; \\\\*\\\\*bold\\\\*\\\\* \\\\[link\\\\]\\\\(javascript:x\\\\)'
    """
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", escaped)


def export_markdown(turn: Turn, steps: list[Shown]) -> str:
    """One answer with its evidence as Markdown, each crop a ``data:`` URI image."""
    lines = [f"# {md_text(turn.question)}", "", f"**Answer:** {md_text(_headline(turn))}", ""]
    if steps:
        lines += ["## Evidence", ""]
    for s in steps:
        lines.append(f"{s.tag}. {md_text(s.text)} ({md_text(s.label)})")
        if s.png:
            lines += ["", f"   ![step {s.tag}: {md_text(s.label)}]({s.data_uri})"]
        lines.append("")
    if turn.answer is None and turn.output:
        fence = "~" * max(4, 1 + max((len(m) for m in re.findall(r"~+", turn.output)), default=0))
        lines += ["## Model output", "", fence, turn.output.replace("<", "&lt;"), fence, ""]
    return "\n".join(lines)
