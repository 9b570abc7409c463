"""How an ``Answer`` reads: as JSON, as terminal lines and as the HTML evidence view.

Every view cites a page as a person would ("report.pdf p. 3"), never by its hash id alone: the
id stays in the JSON (``page``) and in the page captions of the HTML view, for tools. ``evidra
ask``, the web app and ``evidra.RAG`` users share these helpers, so a citation reads the same
everywhere.

>>> from evidra.rag import Citation
>>> format_citation(citation_record(Citation(1, "Founded 1987.", "ab-p0002", 0, None,
...                                          file="report.pdf", page_number=2)))
'step 1: report.pdf p. 2: Founded 1987.'
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from evidra.core.types import Page
    from evidra.corpus.metadata import PageMeta
    from evidra.eval.viewer import ViewerRecord
    from evidra.rag import Answer, Citation
    from evidra.retrieval.interfaces import Hit

NO_HITS = "no relevant page: nothing in the index matches the question"
ANSWER_COLOR, STEP_COLOR, UNSUPPORTED_COLOR = "#16a34a", "#2563eb", "#dc2626"


class CitationRecord(TypedDict):
    """A cited step as ``evidra ask --json`` writes it."""

    step: int
    text: str
    cite: str | None
    page: str | None
    file: str | None
    page_number: int | None
    page_index: int | None  # 1-based
    box: list[float] | None
    score: float | None
    supported: bool | None
    reason: str


class PageRecord(TypedDict):
    """A page shown to the model, as ``evidra ask --json`` writes it."""

    rank: int
    cite: str
    page_id: str
    file: str | None
    source: str | None
    page_number: int | None
    score: float | None
    doc_id: str | None
    title: str | None
    meta: dict[str, str]


class RetrievedRecord(TypedDict):
    rank: int
    page_id: str
    score: float


class AnswerRecord(TypedDict):
    """An answer as ``evidra ask --json`` writes it."""

    question: str
    answer: str | None
    no_hits: bool
    pages: list[str]
    cited_pages: list[PageRecord]
    steps: list[CitationRecord]
    answer_box: CitationRecord | None
    retrieved: list[RetrievedRecord]
    index: list[str]
    finish_reason: str | None
    errors: list[str]
    output: str


def citation_record(c: Citation) -> CitationRecord:
    """A cited step (or the answer's citation, step 0) as JSON."""
    return {
        "step": c.step,
        "text": c.text,
        "cite": c.cite if c.page_id else None,
        "page": c.page_id,
        "file": c.file or None,
        "page_number": c.page_number,
        "page_index": c.page_index + 1 if c.page_index is not None else None,
        "box": list(c.box.as_tuple()) if c.box is not None else None,
        "score": c.score,
        "supported": c.supported,
        "reason": c.reason,
    }


def page_record(page: Page, rank: int, hit: Hit | None = None, meta: PageMeta | None = None) -> PageRecord:
    """A page shown to the model (with its retrieval score, when retrieved, and its document's
    id, title and user metadata, when known) as JSON."""
    return {
        "rank": rank,
        "cite": page.citation,
        "page_id": page.id,
        "file": page.file_name or None,
        "source": page.source or None,
        "page_number": page.page_number,
        "score": hit.score if hit is not None else None,
        "doc_id": meta.doc_id if meta else None,
        "title": meta.title if meta else None,
        "meta": dict(meta.meta) if meta else {},
    }


def answer_record(answer: Answer) -> AnswerRecord:
    scored = {h.page_id: h for h in answer.retrieved}
    metas = {m.page_id: m for m in answer.sources}
    return {
        "question": answer.question,
        "answer": answer.text,
        "no_hits": answer.no_hits,
        "pages": [p.id for p in answer.pages],
        "cited_pages": [
            page_record(p, i, scored.get(p.id), metas.get(p.id)) for i, p in enumerate(answer.pages, 1)
        ],
        "steps": [citation_record(c) for c in answer.steps],
        "answer_box": citation_record(answer.answer_box) if answer.answer_box else None,
        "retrieved": [
            {"rank": i, "page_id": h.page_id, "score": h.score} for i, h in enumerate(answer.retrieved, 1)
        ],
        "index": list(answer.index),
        "finish_reason": answer.finish_reason,
        "errors": list(answer.errors),
        "output": answer.output,
    }


def _where(record: CitationRecord) -> str:
    page = record["cite"] or "no page"
    if not record["box"]:
        return page
    return f"{page}, box (" + ", ".join(f"{c:g}" for c in record["box"]) + ")"


def format_citation(record: CitationRecord) -> str:
    """One human line per cited step: number, page (file and page number), box, then the text."""
    name = "answer" if record["step"] == 0 else f"step {record['step']}"
    return f"{name}: {_where(record)}: {record['text']}"


def format_verdict(record: CitationRecord) -> str:
    """One human line per verified step: number, verdict and why, page, box, then the step text."""
    verdict = "supported" if record["supported"] else "unsupported"
    return f"step {record['step']}: {verdict} [{record['reason']}] {_where(record)}: {record['text']}"


def caption(page: Page, rank: int, hit: Hit | None = None) -> str:
    """The caption under a page: ``"1. report.pdf p. 3 · score 12.4"``."""
    score = f" · score {hit.score:.4g}" if hit is not None else ""
    return f"{rank}. {page.citation}{score}"


def viewer_record(answer: Answer) -> ViewerRecord:
    """The evidence view of an answer: each shown page, captioned, with the boxes its steps cite."""
    from evidra.eval.viewer import ViewerBox, ViewerPage, ViewerRecord, ViewerStep

    cited = [*answer.steps, *([answer.answer_box] if answer.answer_box else [])]
    scored = {h.page_id: h for h in answer.retrieved}
    pages = []
    for i, page in enumerate(answer.pages):
        boxes = tuple(
            ViewerBox(c.box, _label(c), _color(c)) for c in cited if c.page_index == i and c.box is not None
        )
        title = f"{caption(page, i + 1, scored.get(page.id))} · {page.id}"
        pages.append(ViewerPage(page.image_path, page.width, page.height, title, boxes))
    steps = tuple(ViewerStep(_label(c), _step_text(c), _color(c)) for c in cited)
    details = {"retrieved from": ", ".join(answer.index)} if answer.index else {}
    if answer.errors:
        details["format problems"] = "; ".join(answer.errors)
    prediction = NO_HITS if answer.no_hits else answer.text
    return ViewerRecord(
        answer.question, prediction, (), None, tuple(pages), answer.output, details=details, steps=steps
    )


def write_html(answer: Answer, path: str | Path) -> Path:
    """A self-contained evidence view of ``answer`` (page images inside the file)."""
    from evidra.eval.viewer import write_viewer

    return write_viewer([viewer_record(answer)], path, title="evidra answer", embed_images=True)


def _label(c: Citation) -> str:
    return "answer" if c.step == 0 else str(c.step)


def _color(c: Citation) -> str:
    if c.step == 0:
        return ANSWER_COLOR
    return UNSUPPORTED_COLOR if c.supported is False else STEP_COLOR


def _step_text(c: Citation) -> str:
    verdict = "" if c.supported is None else f" ({'supported' if c.supported else 'unsupported'}: {c.reason})"
    return f"{c.text} [{c.cite if c.page_id else 'no page'}]{verdict}"
