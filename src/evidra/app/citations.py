"""How evidence reads in the app: a page's citation label, and an answer as JSON with its boxes.

``citation_label`` is the one place that names a page for a reader (document file name and
page number, from the page store's records); everything the app shows goes through it.

>>> from evidra.core.types import Page
>>> citation_label(Page("a1b2-p3", "x.png", 10, 10, source="reports/orion.pdf", page_number=3))
'orion.pdf p. 3'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from evidra.app.crops import crop_frame
from evidra.core.jsonvalue import JSON, JSONObject
from evidra.core.types import Box, Page

if TYPE_CHECKING:
    from evidra.rag import Answer, Citation


def citation_label(page: Page) -> str:
    """``<file name> p. <page number>``; the page id when the page has no source."""
    name = PurePosixPath(page.source).name if page.source else page.id
    return f"{name} p. {page.page_number}"


@dataclass(frozen=True)
class Evidence:
    """One cited region: the step it supports, the page, and the box in page pixels."""

    step: int  # 1-based; 0 for the answer's own citation
    text: str
    page_id: str | None
    label: str  # citation_label of the page, "" when the step cites no shown page
    document: str
    page_number: int | None
    box: Box | None
    crop: Box | None = None  # the region a crop shows: the box grown to whole lines (``crops``)

    def as_json(self) -> JSONObject:
        return {
            "step": self.step,
            "text": self.text,
            "page_id": self.page_id,
            "label": self.label,
            "document": self.document,
            "page": self.page_number,
            "box": _rounded(self.box),
            "crop": _rounded(self.crop),
        }


def _rounded(box: Box | None) -> list[JSON] | None:
    return [round(c, 1) for c in box.as_tuple()] if box is not None else None


def _evidence(c: Citation, pages: Mapping[str, Page]) -> Evidence:
    page = pages.get(c.page_id) if c.page_id else None
    if page is None:
        return Evidence(c.step, c.text, None, "", "", None, None)
    crop = crop_frame(c.box, page.words, page.width, page.height) if c.box is not None else None
    label = citation_label(page)
    return Evidence(c.step, c.text, page.id, label, page.source, page.page_number, c.box, crop)


def evidence(answer: Answer) -> list[Evidence]:
    """Every cited step of ``answer``, then the answer's own citation (step 0) if it has one."""
    pages = {p.id: p for p in answer.pages}
    cited = [*answer.steps, *([answer.answer_box] if answer.answer_box is not None else [])]
    return [_evidence(c, pages) for c in cited]


def matched_words(page: Page, query: str, limit: int = 24) -> list[Box]:
    """Boxes of the page's words that hold a word of ``query`` (case and punctuation aside; words of
    one or two letters only when they are numbers), for a search hit to show where it matched.

    >>> from evidra.core.types import CoordSpace, Word
    >>> w = lambda t, x: Word(t, Box(x, 0, x + 5, 5, CoordSpace.PAGE))
    >>> page = Page("p", "x.png", 99, 9, words=(w("Orion,", 0), w("was", 10), w("1,250", 20)))
    >>> [b.x1 for b in matched_words(page, "Was Orion's staff 1,250?")]
    [0, 10, 20]
    """
    terms = {t for t in re.findall(r"\w+", query.casefold()) if len(t) > 2 or t.isdigit()}
    out = []
    for word in page.words:
        if terms.intersection(re.findall(r"\w+", word.text.casefold())):
            out.append(word.box)
            if len(out) == limit:
                break
    return out


def page_json(page: Page, score: float | None = None, matches: list[Box] | None = None) -> JSONObject:
    """A page as the app's pages and scripts see it (its image at ``/pages/<id>/image``)."""
    out: JSONObject = {
        "page_id": page.id,
        "label": citation_label(page),
        "document": page.source,
        "page": page.page_number,
        "width": page.width,
        "height": page.height,
        "image": f"/pages/{page.id}/image",
    }
    if score is not None:
        out["score"] = round(score, 4)
    if matches is not None:
        out["matches"] = [_rounded(b) for b in matches]
        if matches:  # what a search card's crop shows: the first match's whole line
            out["crop"] = _rounded(crop_frame(matches[0], page.words, page.width, page.height))
    return out


def answer_json(answer: Answer) -> JSONObject:
    """The answer, its evidence and the pages it was given, as the app sends it; ``parsed`` says
    whether the model's output held a readable answer (``answer`` is None when not)."""
    from evidra.rag_view import NO_HITS

    return {
        "question": answer.question,
        "answer": answer.text,
        "parsed": answer.parsed,  # False: the output held no readable answer (show it as raw text)
        "no_hits": answer.no_hits,  # True: no page matched, no model was asked (``notice`` says so)
        "notice": NO_HITS if answer.no_hits else "",
        "evidence": [e.as_json() for e in evidence(answer)],
        "pages": [page_json(p) for p in answer.pages],
        "errors": list(answer.errors),
        "finish_reason": answer.finish_reason,
        "output": answer.output,
    }


def sources_line(answer: Answer) -> str:
    """``Sources: a.pdf p. 1 [x0, y0, x1, y1]; ...`` for a plain-text reply; empty without evidence."""
    cited = []
    for e in evidence(answer):
        if e.label and e.box is not None:
            cited.append(f"{e.label} [{', '.join(f'{round(c, 1):g}' for c in e.box.as_tuple())}]")
        elif e.label:
            cited.append(e.label)
    unique = list(dict.fromkeys(cited))
    return f"Sources: {'; '.join(unique)}" if unique else ""
