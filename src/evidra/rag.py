"""Retrieve pages, then answer with evidence: evidra's two-line Python API.

>>> rag = RAG.from_documents("docs/", model="ckpt/lat-7b")                  # doctest: +SKIP
>>> answer = rag.ask("When was Orion founded?")                              # doctest: +SKIP
>>> answer.text, [(s.page_id, s.box) for s in answer.steps], answer.retrieved  # doctest: +SKIP

``RAG.load(store, index, model=...)`` opens what ``evidra ingest`` and ``evidra index build``
wrote: ``index`` is an index directory, a ``serve-index`` URL, several of them (fused by
reciprocal-rank fusion: hybrid retrieval), or None for the index registered in the store.
``from_documents`` ingests a folder and builds (or updates) the index first. Each ``ask``
retrieves the top ``k`` pages, shows them to the model in the paradigm's format (LAT's chain of
evidence by default, whose every step cites a page and a box) and returns a frozen ``Answer``.
``evidra ask`` is this class behind a command line.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evidra.errors import InvalidInputError
from evidra.retrieval.base import check_k
from evidra.types import Box, CoordSpace, Page, Parsed, Sample

if TYPE_CHECKING:
    from evidra.corpus.store import PageStore
    from evidra.eval.viewer import ViewerRecord
    from evidra.models.generation import SamplingParams
    from evidra.models.loading import VLM
    from evidra.models.streaming import OnText
    from evidra.retrieval.attach import StoreRetriever
    from evidra.retrieval.base import Hit
    from evidra.rewards.embedding import StepSimilarity, StepVerdict

logger = logging.getLogger(__name__)

DEFAULT_K = 3
DEFAULT_PARADIGM = "coe"  # LAT's chain of evidence: every step cites a page and a box


@dataclass(frozen=True)
class Citation:
    """One reasoning step of an answer and the page region it cites."""

    step: int  # 1-based
    text: str
    page_id: str | None  # None when the cited image is not among the pages shown
    page_index: int | None  # 0-based among the pages shown
    box: Box | None  # page pixels; None when the step cites no readable box
    score: float | None = None  # with verify: similarity of the box's crop to the text
    supported: bool | None = None  # with verify: score >= tau; None when not verified
    reason: str = ""  # with verify: why the step is (un)supported


@dataclass(frozen=True)
class Answer:
    """What ``RAG.ask`` returns: the answer, its cited steps, and the pages it was given."""

    question: str
    text: str | None  # None when the output holds no parseable answer
    steps: tuple[Citation, ...]
    answer_box: Citation | None  # the answer's own citation (chain of evidence), if any
    pages: tuple[Page, ...]  # shown to the model, in order (image k is pages[k - 1])
    retrieved: tuple[Hit, ...]  # the index's hits, best first; empty when pages were chosen
    index: tuple[str, ...]  # where the pages were retrieved from; empty when chosen
    output: str  # the model's raw text
    errors: tuple[str, ...]  # format problems of the output (data, never raised)
    finish_reason: str
    verified: bool = False


class RAG:
    """A page store, an optional retriever over it, a vision-language model and a paradigm."""

    def __init__(
        self,
        store: PageStore,
        vlm: VLM,
        retriever: StoreRetriever | None = None,
        *,
        paradigm: str = DEFAULT_PARADIGM,
        k: int = DEFAULT_K,
        max_pages: int = 4,
        params: SamplingParams | None = None,
        keep: tempfile.TemporaryDirectory[str] | None = None,
    ) -> None:
        from evidra.models.generation import SamplingParams
        from evidra.paradigms import PARADIGMS

        check_k(k)
        self.store, self.vlm, self.retriever = store, vlm, retriever
        self.paradigm_name = paradigm
        self.paradigm = PARADIGMS.get(paradigm)()
        self.k, self.max_pages = k, max_pages
        self.params = params or SamplingParams(max_new_tokens=256, temperature=0.0)
        self._keep = keep  # a temporary folder holding the store, removed with this object

    @classmethod
    def load(
        cls,
        store: str | Path | PageStore,
        index: str | Path | Sequence[str | Path] | None = None,
        *,
        model: str | Path,
        paradigm: str = DEFAULT_PARADIGM,
        k: int = DEFAULT_K,
        max_pages: int = 4,
        params: SamplingParams | None = None,
        dtype: str = "auto",
        device: str = "auto",
        max_pixels: int | None = None,
        keep: tempfile.TemporaryDirectory[str] | None = None,
    ) -> RAG:
        """Open ``store`` and ``index`` (None: the store's registered index, if any), load ``model``.

        The paradigm and index are checked before the model loads; ``model`` is a directory, a hub
        id, ``tiny:ARCH``, or a training run or checkpoint folder (exported once, as ``evidra ask``
        does). ``device`` and ``dtype`` ``auto``: the GPU in bfloat16 when one is present.
        """
        from evidra.corpus import PageStore
        from evidra.devices import resolve_device, resolve_dtype
        from evidra.models.loading import load_vlm
        from evidra.paradigms import PARADIGMS
        from evidra.retrieval.attach import attach, registered_index
        from evidra.rl.export import resolve_trained_model

        PARADIGMS.get(paradigm)
        check_k(k)
        opened = store if isinstance(store, PageStore) else PageStore.open(store)
        retriever = None
        try:
            where = _locations(index) if index is not None else [w for w in [registered_index(opened)] if w]
            retriever = attach(where, opened) if where else None
            device = resolve_device(device)
            vlm = load_vlm(
                resolve_trained_model(model),
                dtype=resolve_dtype(dtype, device),
                device=device,
                max_pixels=max_pixels,
            )
        except BaseException:
            if retriever is not None:
                retriever.close()
            if opened is not store:  # a store the caller opened stays theirs to close
                opened.close()
            raise
        return cls(
            opened, vlm, retriever, paradigm=paradigm, k=k, max_pages=max_pages, params=params, keep=keep
        )

    @classmethod
    def from_documents(
        cls,
        documents: str | Path,
        *,
        model: str | Path,
        retriever: str = "bm25",
        encoder_model: str | Path = "",
        store: str | Path | None = None,
        index: str | Path | None = None,
        dpi: float = 150.0,
        **load_options: Any,
    ) -> RAG:
        """Ingest ``documents`` into ``store``, index it with ``retriever``, and ``load`` the result.

        ``retriever`` is an encoder name of ``evidra index build`` (``bm25``, or ``colqwen2`` /
        ``colpali`` / ``dse`` with ``encoder_model`` its checkpoint directory). Without ``store``
        the pages go to a temporary folder removed with the returned object; ``index`` defaults to
        ``<store>/index-<retriever>``. Both are reused when they exist: only new pages are added.
        """
        from evidra.corpus import PageStore, ingest

        keep: tempfile.TemporaryDirectory[str] | None = None
        if store is None:
            keep = tempfile.TemporaryDirectory(prefix="evidra-rag-")
            store = Path(keep.name) / "store"
        try:
            report = ingest(documents, store, dpi=dpi)
            for failed in report.failed:
                logger.warning("skipped %s: %s", failed.path, failed.reason)
            opened = PageStore.open(store)
            if not len(opened):
                raise InvalidInputError(
                    f"no pages were ingested from {str(documents)!r}; give it a folder of PDFs or images"
                )
            out = Path(index) if index is not None else opened.root / f"index-{retriever}"
            _build_or_update(opened, out, retriever, encoder_model)
            opened.register_index(out)
            return cls.load(opened, [out], model=model, keep=keep, **load_options)
        except BaseException:
            if keep is not None:
                keep.cleanup()
            raise

    def retrieve(self, question: str, k: int | None = None) -> list[Hit]:
        """The index's top ``k`` pages for ``question`` (all of them pages of the store)."""
        if self.retriever is None:
            raise InvalidInputError(
                f"store {self.store.root} has no index; build one with `evidra index build --store "
                f"{self.store.root} --out DIR --encoder bm25` and pass it (RAG.load(store, DIR))"
            )
        k = self.k if k is None else k
        check_k(k)
        return self.retriever.search(question, k)

    def ask(
        self,
        question: str,
        *,
        k: int | None = None,
        pages: Sequence[str] | None = None,
        verify: bool = False,
        similarity: StepSimilarity | None = None,
        tau: float | None = None,
        on_text: OnText | None = None,
    ) -> Answer:
        """Answer ``question`` over the top ``k`` retrieved pages (or the page ids in ``pages``).

        A store without an index answers over all its pages while it has at most ``max_pages``.
        ``verify`` checks each chain-of-evidence step as LAT's attribution reward does (the
        box's crop against the step text, ``similarity`` defaulting to the text layer's overlap).
        ``on_text`` is handed each piece of the model's text as it is generated (streaming).
        """
        from evidra.models.generation import generate

        if verify and not self.paradigm_name.startswith("coe"):
            raise InvalidInputError(
                f"verify checks chain-of-evidence steps; use paradigm 'coe', not {self.paradigm_name!r}"
            )
        hits, shown = self._pages(question, k, pages)
        sample = Sample(id="ask", question=question, pages=tuple(shown))
        chat = self.paradigm.build_messages(sample, shown)
        streaming = {"on_text": on_text} if on_text is not None else {}
        (gen,) = generate(self.vlm, [chat], self.params, **streaming)
        parsed = self.paradigm.parse(gen.text)
        steps = self._citations(parsed, shown)
        if verify:
            steps = _verified(parsed, shown, similarity, tau)
        return Answer(
            question=question,
            text=parsed.answer,
            steps=tuple(steps),
            answer_box=self._answer_citation(parsed, shown),
            pages=tuple(shown),
            retrieved=tuple(hits),
            index=self.retriever.where if hits and self.retriever is not None else (),
            output=gen.text,
            errors=parsed.errors,
            finish_reason=gen.finish_reason,
            verified=verify,
        )

    def _pages(
        self, question: str, k: int | None, chosen: Sequence[str] | None
    ) -> tuple[list[Hit], list[Page]]:
        if chosen:
            return [], [self.store.get(pid) for pid in chosen]
        if self.retriever is not None:
            hits = self.retrieve(question, k)
            if not hits:  # BM25 finds nothing when no word of the question is in the documents
                raise InvalidInputError(
                    f"index {', '.join(self.retriever.where)} found no page for {question!r}; ask with "
                    "words the documents use, or use a visual index (`evidra index build --encoder colqwen2`)"
                )
            return hits, [self.store.get(h.page_id) for h in hits]
        n = len(self.store)
        if n == 0:
            raise InvalidInputError(f"store {str(self.store.root)!r} has no pages; run `evidra ingest` first")
        if n > self.max_pages:
            raise InvalidInputError(
                f"store {self.store.root} has {n} pages, more than max_pages {self.max_pages}, and no "
                f"index; build one with `evidra index build --store {self.store.root} --out DIR --encoder "
                "bm25` and pass it (--index DIR), or choose pages with --page ID (see `evidra pages`)"
            )
        return [], self.store.pages()

    def _page_box(self, box: Box | None, page: Page | None) -> Box | None:
        """``box`` in page pixels (chain-of-evidence boxes already are; others are converted)."""
        from evidra.geometry import ImageFrame, convert_box

        if box is None or page is None or box.space is CoordSpace.PAGE:
            return box
        if self.vlm.spec is None:
            return None
        return convert_box(box, CoordSpace.PAGE, ImageFrame.for_page(page.width, page.height, self.vlm.spec))

    def _citations(self, parsed: Parsed, pages: Sequence[Page]) -> list[Citation]:
        out = []
        for i, step in enumerate(parsed.steps, 1):
            index = _page_index(step.page_index, pages)
            page = pages[index] if index is not None else None
            out.append(
                Citation(i, step.text, page.id if page else None, index, self._page_box(step.box, page))
            )
        return out

    def _answer_citation(self, parsed: Parsed, pages: Sequence[Page]) -> Citation | None:
        if parsed.answer_box is None:
            return None
        index = _page_index(parsed.answer_page, pages)
        page = pages[index] if index is not None else None
        box = self._page_box(parsed.answer_box, page)
        return Citation(0, parsed.answer or "", page.id if page else None, index, box)

    def close(self) -> None:
        if self.retriever is not None:
            self.retriever.close()
        self.store.close()
        if self._keep is not None:
            self._keep.cleanup()

    def __enter__(self) -> RAG:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _locations(index: str | Path | Sequence[str | Path]) -> list[str]:
    return [str(index)] if isinstance(index, (str, Path)) else [str(i) for i in index]


def _page_index(index: int | None, pages: Sequence[Page]) -> int | None:
    """The 0-based page a step cites; one shown page is the page of a step that names none."""
    if index is None and len(pages) == 1:
        return 0
    return index if index is not None and 0 <= index < len(pages) else None


def _verified(
    parsed: Parsed, pages: Sequence[Page], similarity: StepSimilarity | None, tau: float | None
) -> list[Citation]:
    from evidra.rewards.embedding import LAT_TAU, TextOverlapSimilarity, verify_steps

    verdicts: list[StepVerdict] = verify_steps(
        parsed, pages, similarity or TextOverlapSimilarity(), tau=LAT_TAU if tau is None else tau
    )
    return [
        Citation(v.index, v.text, v.page_id, v.page_index, v.box, v.score, v.supported, v.reason)
        for v in verdicts
    ]


def _build_or_update(store: PageStore, out: Path, encoder: str, encoder_model: str | Path) -> None:
    from evidra.retrieval.engine import MANIFEST, build_index, open_index

    if (out / MANIFEST).is_file():
        with open_index(out) as engine:
            have = set(engine.index.page_ids())
            new = [p for p in store.pages() if p.id not in have]
            if new:
                engine.add(new)
        return
    build_index(store.pages(), out, encoder, encoder_model).close()


def viewer_record(answer: Answer) -> ViewerRecord:
    """The evidence view of an answer: each shown page with the boxes its steps cite."""
    from evidra.eval.viewer import ViewerBox, ViewerPage, ViewerRecord, ViewerStep

    cited = [*answer.steps, *([answer.answer_box] if answer.answer_box else [])]
    scores = {h.page_id: h.score for h in answer.retrieved}
    pages = []
    for i, page in enumerate(answer.pages):
        boxes = tuple(
            ViewerBox(c.box, _label(c), _color(c)) for c in cited if c.page_index == i and c.box is not None
        )
        score = f", score {scores[page.id]:.4g}" if page.id in scores else ""
        title = f"image {i + 1}: {page.source} p.{page.page_number} ({page.id}{score})"
        pages.append(ViewerPage(page.image_path, page.width, page.height, title, boxes))
    steps = tuple(ViewerStep(_label(c), _step_text(c), _color(c)) for c in cited)
    details = {"retrieved from": ", ".join(answer.index)} if answer.index else {}
    return ViewerRecord(
        answer.question, answer.text, (), None, tuple(pages), answer.output, details=details, steps=steps
    )


def write_html(answer: Answer, path: str | Path) -> Path:
    """A self-contained evidence view of ``answer`` (page images inside the file)."""
    from evidra.eval.viewer import write_viewer

    return write_viewer([viewer_record(answer)], path, title="evidra answer", embed_images=True)


def _label(c: Citation) -> str:
    return "answer" if c.step == 0 else str(c.step)


def _color(c: Citation) -> str:
    if c.step == 0:
        return "#16a34a"
    return "#dc2626" if c.supported is False else "#2563eb"


def _step_text(c: Citation) -> str:
    where = f" [page {c.page_id}]" if c.page_id else " [no page]"
    verdict = "" if c.supported is None else f" ({'supported' if c.supported else 'unsupported'}: {c.reason})"
    return f"{c.text}{where}{verdict}"
