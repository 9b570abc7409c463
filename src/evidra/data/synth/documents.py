"""Procedural documents with known answers and gold boxes, for the demo, tests and benchmarks.

``generate_documents`` writes PDFs (1-3 Letter pages each, with a real Helvetica text layer)
plus their PNG renders, and keeps each page's words as PDFium reads them back from the PDF (the
words an ingest of the PDFs gives), so the rendered pages carry their text layer without an
ingest; ``generate_image_documents`` writes single-page PNGs drawn with PIL (no text layer).
Pages hold titled paragraphs of facts ("The Orion project was founded in 1987 in Lisbon."), a
gridded table (city / population / founded) or a bar chart with value labels. Every question
comes with its answer, the page it is on, the answer's box (``gold_box``), the box and text of
the sentence / table row / bar holding it (``evidence_box``, ``evidence_text``), all in page
pixels at the chosen DPI; one question per document asks about an absent entity ("No answer").

Layout is computed once in points (1/72 inch, origin top-left) with the target's own font
metrics (Helvetica AFM widths for PDF, PIL's built-in scalable font for PNG), so a gold box is
derived from where the text was really put: Helvetica's ascender/descender for PDF,
``ImageDraw.textbbox`` for PNG. Output is deterministic per seed (same bytes, same page ids).

>>> corpus = generate_documents("synth/", n_docs=2, seed=0)      # doctest: +SKIP
>>> samples = corpus.samples()                                   # doctest: +SKIP
"""

from __future__ import annotations

import io
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Protocol

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, EvidenceBox, Page, Sample, Word, content_hash, make_page_id
from evidra.corpus.pdfwriter import HELVETICA_ASCENT, HELVETICA_DESCENT, PdfCanvas, text_width, write_pdf
from evidra.data.synth import _documents_layout as content
from evidra.data.synth._documents_layout import Fact, Layout, Run

if TYPE_CHECKING:
    from PIL.ImageDraw import ImageDraw
    from PIL.ImageFont import FreeTypeFont

PAGE_SIZE = (612.0, 792.0)  # US Letter in points
NO_ANSWER = "No answer"
DOCS_DIR = "docs"  # documents to ingest
RENDERS_DIR = "renders"  # PNG renders of the PDF pages
Kind = Literal["text", "table", "chart", "none"]


@dataclass(frozen=True)
class SynthQuestion:
    """One generated question, ready to become a ``Sample`` once its document's pages are known.

    ``gold_box`` tightly encloses the answer text; ``evidence_box`` the sentence, table row or
    bar (with its labels) that carries it. Both are in page pixels at the corpus DPI and are
    None for unanswerable questions, whose ``page_number`` and ``page_id`` are None too.
    """

    id: str
    question: str
    answers: tuple[str, ...]
    kind: Kind
    doc_id: str
    source: str  # file name relative to ``SynthCorpus.docs_dir``, as ingest records it
    page_number: int | None
    page_id: str | None
    gold_box: Box | None
    evidence_box: Box | None
    evidence_text: str
    answerable: bool = True

    def to_sample(self, pages: Sequence[Page], dataset: str = "synth") -> Sample:
        """A ``Sample`` whose candidate pages are ``pages`` (normally the document's pages)."""
        gold = (self.page_id,) if self.page_id is not None else ()
        boxes = (EvidenceBox(self.page_id, self.gold_box),) if self.page_id and self.gold_box else ()
        extras: dict[str, object] = {"kind": self.kind, "source": self.source}
        region = self.evidence_box
        evidence = EvidenceBox(self.page_id, region) if self.page_id and region is not None else None
        return Sample(
            id=self.id,
            question=self.question,
            answers=self.answers,
            pages=tuple(pages),
            gold_pages=gold,
            gold_boxes=boxes,
            gold_evidence={self.page_id: self.evidence_text} if self.page_id else {},
            answerable=self.answerable,
            answer_type="str" if self.answerable else "none",
            dataset=dataset,
            extras=extras,
            evidence_box=evidence,
        )


@dataclass(frozen=True)
class SynthDocument:
    """One generated file: its id, file name, page ids, rendered page images and their words."""

    id: str
    source: str  # file name relative to ``SynthCorpus.docs_dir`` (.pdf, or .png for image documents)
    page_ids: tuple[str, ...]
    image_paths: tuple[str, ...]  # absolute paths of the page PNGs, in page order
    page_sizes: tuple[tuple[int, int], ...]  # (width, height) in pixels of each PNG
    # each page's text layer in pixels of its PNG (PDF documents); empty: pages without words
    page_words: tuple[tuple[Word, ...], ...] = ()

    def words(self, index: int) -> tuple[Word, ...]:
        """The words of the page at 0-based ``index`` (none for an image document)."""
        return self.page_words[index] if index < len(self.page_words) else ()


@dataclass(frozen=True)
class SynthCorpus:
    """Everything ``generate_documents`` wrote, and the questions about it."""

    root: str
    dpi: float
    documents: tuple[SynthDocument, ...]
    questions: tuple[SynthQuestion, ...]

    @property
    def docs_dir(self) -> Path:
        """The folder to ingest: the documents only, not the PNG renders (which would duplicate pages)."""
        return Path(self.root) / DOCS_DIR

    def pages(self) -> dict[str, Page]:
        """Pages built from the rendered PNGs with their words (PDF documents), keyed by page id."""
        out: dict[str, Page] = {}
        for doc in self.documents:
            for number, (pid, path, (w, h)) in enumerate(
                zip(doc.page_ids, doc.image_paths, doc.page_sizes, strict=True), start=1
            ):
                out[pid] = Page(pid, path, w, h, doc.source, number, doc.words(number - 1), self.dpi)
        return out

    def samples(self, pages: Mapping[str, Page] | None = None, dataset: str = "synth") -> tuple[Sample, ...]:
        """One ``Sample`` per question, with its document's pages as candidates.

        Pass ``{p.id: p for p in store.pages()}`` to use pages from an ingested store; by
        default pages come from the PNG renders, with the words the PDFs hold.
        """
        by_id = dict(pages) if pages is not None else self.pages()
        docs = {d.id: d for d in self.documents}
        out = []
        for q in self.questions:
            ids = docs[q.doc_id].page_ids
            missing = [pid for pid in ids if pid not in by_id]
            if missing:
                raise InvalidInputError(
                    f"pages {missing} of {q.source} are not in the given pages; ingest {self.docs_dir} first"
                )
            out.append(q.to_sample([by_id[pid] for pid in ids], dataset))
        return tuple(out)


class _Target(Protocol):
    """A drawing backend: measures text for layout and boxes placed text in page pixels."""

    scale: float

    def width(self, text: str, size: float) -> float: ...

    def text_box(self, run: Run) -> Box: ...


@dataclass
class _PdfTarget:
    scale: float

    def width(self, text: str, size: float) -> float:
        return text_width(text, size)

    def text_box(self, run: Run) -> Box:
        """Advance width by ascender/descender of Helvetica: the box a reader selects."""
        s = self.scale
        top = run.baseline - HELVETICA_ASCENT * run.size / 1000.0
        bottom = run.baseline + HELVETICA_DESCENT * run.size / 1000.0
        return Box(run.x * s, top * s, (run.x + text_width(run.text, run.size)) * s, bottom * s)

    def draw(self, layout: Layout) -> PdfCanvas:
        canvas = PdfCanvas(*PAGE_SIZE)
        for op in layout.ops:
            if isinstance(op, Run):
                canvas.text(op.x, op.baseline, op.text, op.size, op.color)
            elif op.kind == "line":
                canvas.line(op.x0, op.y0, op.x1, op.y1, color=op.stroke or (0, 0, 0), line_width=op.width)
            else:
                canvas.rect(op.x0, op.y0, op.x1, op.y1, fill=op.fill, stroke=op.stroke, line_width=op.width)
        return canvas


@dataclass
class _PilTarget:
    scale: float
    _fonts: dict[float, FreeTypeFont] = field(default_factory=dict)
    _draw: ImageDraw | None = None

    def font(self, size: float) -> FreeTypeFont:
        from PIL import ImageFont

        if size not in self._fonts:
            self._fonts[size] = ImageFont.load_default(size=size * self.scale)  # type: ignore[assignment]
        return self._fonts[size]

    def width(self, text: str, size: float) -> float:
        return float(self.font(size).getlength(text)) / self.scale

    def text_box(self, run: Run) -> Box:
        assert self._draw is not None, "text_box needs draw() first"
        x1, y1, x2, y2 = self._draw.textbbox(self._xy(run), run.text, font=self.font(run.size), anchor="ls")
        return Box(float(x1), float(y1), float(x2), float(y2))

    def _xy(self, run: Run) -> tuple[float, float]:
        return (run.x * self.scale, run.baseline * self.scale)

    def draw(self, layout: Layout) -> bytes:
        from PIL import Image, ImageDraw

        s = self.scale
        image = Image.new("RGB", (round(PAGE_SIZE[0] * s), round(PAGE_SIZE[1] * s)), "white")
        self._draw = ImageDraw.Draw(image)
        for op in layout.ops:
            if isinstance(op, Run):
                rgb = _rgb(op.color)
                self._draw.text(self._xy(op), op.text, font=self.font(op.size), fill=rgb, anchor="ls")
            elif op.kind == "line":
                xy = [(op.x0 * s, op.y0 * s), (op.x1 * s, op.y1 * s)]
                self._draw.line(xy, fill=_rgb(op.stroke or (0, 0, 0)), width=max(1, round(op.width * s)))
            else:
                self._draw.rectangle(
                    [(op.x0 * s, op.y0 * s), (op.x1 * s, op.y1 * s)],
                    fill=None if op.fill is None else _rgb(op.fill),
                    outline=None if op.stroke is None else _rgb(op.stroke),
                    width=max(1, round(op.width * s)),
                )
        buf = io.BytesIO()
        image.save(buf, format="PNG", compress_level=3)
        return buf.getvalue()


def _rgb(color: tuple[float, float, float]) -> tuple[int, int, int]:
    return (round(color[0] * 255), round(color[1] * 255), round(color[2] * 255))


def _union(boxes: Sequence[Box]) -> Box:
    return Box(
        min(b.x1 for b in boxes), min(b.y1 for b in boxes), max(b.x2 for b in boxes), max(b.y2 for b in boxes)
    )


def _question(
    fact: Fact, target: _Target, qid: str, doc_id: str, source: str, number: int, pid: str
) -> SynthQuestion:
    """Turn a laid-out fact into a question with boxes in page pixels."""
    s = target.scale
    parts = [target.text_box(r) for r in fact.evidence_runs]
    parts += [Box(x0 * s, y0 * s, x1 * s, y1 * s) for x0, y0, x1, y1 in fact.evidence_rects]
    return SynthQuestion(
        qid,
        fact.question,
        fact.answers,
        fact.kind,
        doc_id,
        source,
        number,
        pid,
        target.text_box(fact.answer_run),
        _union(parts),
        fact.evidence_text,
    )


def _absent(rng: random.Random, pools: content.Pools, qid: str, doc_id: str, source: str) -> SynthQuestion:
    question = content.absent_question(rng, pools)
    return SynthQuestion(
        qid, question, (NO_ANSWER,), "none", doc_id, source, None, None, None, None, "", False
    )


def _pick(rng: random.Random, facts: Sequence[Fact], k: int) -> list[Fact]:
    return list(facts) if len(facts) <= k else rng.sample(list(facts), k)


def _check(n_docs: int, dpi: float, max_pages: int) -> None:
    if n_docs < 1:
        raise InvalidInputError(f"n_docs must be at least 1, got {n_docs}")
    if dpi <= 0:
        raise InvalidInputError(f"dpi must be positive, got {dpi}")
    if not 1 <= max_pages <= 3:
        raise InvalidInputError(f"max_pages must be 1, 2 or 3, got {max_pages}")


def _render_pngs(
    data: bytes, dpi: float, out: Path, doc_id: str, ids: tuple[str, ...], source: str
) -> SynthDocument:
    """Render every page of a PDF to ``out/{doc_id}_p{n}.png``, keeping the words PDFium reads."""
    from evidra.corpus.pdf import render_pdf

    paths, sizes, words = [], [], []
    for rendered in render_pdf(data, dpi, doc_id):
        path = out / f"{doc_id}_p{rendered.page_number}.png"
        rendered.image.save(path, format="PNG", compress_level=3)
        paths.append(str(path))
        sizes.append(rendered.image.size)
        words.append(rendered.words)
    return SynthDocument(doc_id, source, ids, tuple(paths), tuple(sizes), tuple(words))


def generate_documents(
    out_dir: str | Path,
    *,
    n_docs: int = 3,
    seed: int = 0,
    dpi: float = 150,
    max_pages: int = 3,
    questions_per_page: int = 2,
    unanswerable_per_doc: int = 1,
) -> SynthCorpus:
    """Write ``n_docs`` PDFs with PNG renders into ``out_dir`` and return their questions.

    Files: ``docs/doc_{i:03d}.pdf`` and ``renders/doc_{i:03d}_p{n}.png``; ingest
    ``corpus.docs_dir`` to get the pages the questions refer to. Page kinds cycle through text,
    table and chart so that every kind appears once ``n_docs * pages >= 3``.
    """
    _check(n_docs, dpi, max_pages)
    root = Path(out_dir).expanduser().resolve()
    (root / DOCS_DIR).mkdir(parents=True, exist_ok=True)
    (root / RENDERS_DIR).mkdir(exist_ok=True)
    rng = random.Random(seed)
    pools = content.Pools.new(rng)
    target = _PdfTarget(dpi / 72.0)
    docs: list[SynthDocument] = []
    questions: list[SynthQuestion] = []
    for i in range(n_docs):
        doc_id, source = f"doc_{i:03d}", f"doc_{i:03d}.pdf"
        n_pages = rng.randint(1, max_pages)
        layouts = [
            content.layout_page(rng, pools, target, content.KINDS[(i + j) % 3]) for j in range(n_pages)
        ]
        data = write_pdf([target.draw(layout) for layout in layouts])
        (root / DOCS_DIR / source).write_bytes(data)
        file_hash = content_hash(data)
        ids = tuple(make_page_id(file_hash, n) for n in range(1, n_pages + 1))
        docs.append(_render_pngs(data, dpi, root / RENDERS_DIR, doc_id, ids, source))
        picked = [
            (n, f) for n, lay in enumerate(layouts, 1) for f in _pick(rng, lay.facts, questions_per_page)
        ]
        for k, (n, fact) in enumerate(picked):
            questions.append(_question(fact, target, f"{doc_id}-q{k}", doc_id, source, n, ids[n - 1]))
        for k in range(unanswerable_per_doc):
            questions.append(_absent(rng, pools, f"{doc_id}-none{k}", doc_id, source))
    return SynthCorpus(str(root), float(dpi), tuple(docs), tuple(questions))


def generate_image_documents(
    out_dir: str | Path,
    *,
    n_docs: int = 3,
    seed: int = 0,
    dpi: float = 150,
    questions_per_page: int = 2,
    unanswerable_per_doc: int = 1,
) -> SynthCorpus:
    """Write ``n_docs`` single-page PNGs (``docs/img_{i:03d}.png``) drawn with PIL; no PDF, no text layer.

    Gold boxes come from ``ImageDraw.textbbox`` of the drawn text (PIL's built-in font).
    """
    _check(n_docs, dpi, 1)
    root = Path(out_dir).expanduser().resolve()
    (root / DOCS_DIR).mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    pools = content.Pools.new(rng)
    docs: list[SynthDocument] = []
    questions: list[SynthQuestion] = []
    for i in range(n_docs):
        target = _PilTarget(dpi / 72.0)
        doc_id, source = f"img_{i:03d}", f"img_{i:03d}.png"
        layout = content.layout_page(rng, pools, target, content.KINDS[i % 3])
        data = target.draw(layout)
        path = root / DOCS_DIR / source
        path.write_bytes(data)
        pid = make_page_id(content_hash(data), 1)
        size = (round(PAGE_SIZE[0] * target.scale), round(PAGE_SIZE[1] * target.scale))
        docs.append(SynthDocument(doc_id, source, (pid,), (str(path),), (size,)))
        for k, fact in enumerate(_pick(rng, layout.facts, questions_per_page)):
            questions.append(_question(fact, target, f"{doc_id}-q{k}", doc_id, source, 1, pid))
        for k in range(unanswerable_per_doc):
            questions.append(_absent(rng, pools, f"{doc_id}-none{k}", doc_id, source))
    return SynthCorpus(str(root), float(dpi), tuple(docs), tuple(questions))
