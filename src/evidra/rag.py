"""Retrieve pages, then answer with evidence: evidra's two-line Python API.

>>> rag = RAG.from_documents("docs/", model="ckpt/lat-7b")                  # doctest: +SKIP
>>> answer = rag.ask("When was Orion founded?")                              # doctest: +SKIP
>>> answer.text, [(s.page_id, s.box) for s in answer.steps], answer.retrieved  # doctest: +SKIP

``RAG.load(store, index, model=...)`` opens what ``evidra ingest`` and ``evidra index build``
wrote: ``index`` is an index directory, a ``serve-index`` URL, several of them (fused, by default
by the z-scores of each one's hits: hybrid retrieval), or None for the index registered in the store.
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
from evidra.types import Box, CoordSpace, Message, Page, Parsed, Sample

if TYPE_CHECKING:
    from evidra.corpus.metadata import PageMeta, Where
    from evidra.corpus.store import PageStore
    from evidra.models.generation import SamplingParams
    from evidra.models.loading import VLM
    from evidra.models.streaming import OnText
    from evidra.retrieval.attach import StoreRetriever
    from evidra.retrieval.base import Hit
    from evidra.retrieval.hybrid import Fusion
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
    file: str = ""  # the cited page's source file name ("" when no page is cited)
    page_number: int | None = None  # the cited page's 1-based number in that file

    @property
    def cite(self) -> str:
        """``"report.pdf p. 3"``; the page id for a page without a source, "no page" for none."""
        if self.file and self.page_number is not None:
            return f"{self.file} p. {self.page_number}"
        return self.page_id or "no page"


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
    no_hits: bool = False  # the index found no page for the question: the model was not asked
    sources: tuple[PageMeta, ...] = ()  # document, file, title and user metadata of each page shown


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
        encoder: str | Path = "",
        fusion: Fusion | None = None,
    ) -> RAG:
        """Open ``store`` and ``index`` (None: the store's registered index, if any), load ``model``.
        ``encoder`` replaces the checkpoint a visual index recorded (the same weights, moved);
        ``fusion`` fuses several indexes (None: z-scores over each one's top 100 hits).

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
        _check_refs(model, encoder)
        opened = store if isinstance(store, PageStore) else PageStore.open(store)
        retriever = None
        try:
            where = _locations(index) if index is not None else [w for w in [registered_index(opened)] if w]
            retriever = attach(where, opened, str(encoder), fusion) if where else None
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

        _check_refs(model, encoder_model if retriever != "bm25" else "")  # before any page is ingested
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

    def retrieve(
        self, question: str, k: int | None = None, where: Where | Sequence[str] | None = None
    ) -> list[Hit]:
        """The index's top ``k`` pages for ``question`` (all of them pages of the store), among the
        pages ``where`` accepts (``["file=report.pdf", "year=2024"]``; ``evidra.corpus.metadata``)."""
        if self.retriever is None:
            raise InvalidInputError(
                f"store {self.store.root} has no index; build one with `evidra index build --store "
                f"{self.store.root} --out DIR --encoder bm25` and pass it (RAG.load(store, DIR))"
            )
        k = self.k if k is None else k
        check_k(k)
        allowed = self._allowed(where)
        if allowed is not None and self.retriever.filters:  # a serve-index service filters itself
            return self.retriever.search(question, k, where=_where(where))
        exclude = () if allowed is None else set(self.store.page_ids()) - allowed
        return self.retriever.search(question, k, exclude=exclude)

    def _allowed(self, where: Where | Sequence[str] | None) -> set[str] | None:
        """The page ids ``where`` accepts (None: no filter); none at all is an error naming it."""
        chosen = _where(where)
        if not chosen:
            return None
        allowed = set(self.store.page_ids_where(chosen))
        if not allowed:
            raise InvalidInputError(
                f"no page of store {self.store.root} matches {chosen}; filter on file=NAME, doc=ID, "
                "page=N, title=TEXT or a --meta key given at ingest (see `evidra pages`)"
            )
        return allowed

    def ask(
        self,
        question: str,
        *,
        k: int | None = None,
        pages: Sequence[str] | None = None,
        verify: bool = False,
        similarity: StepSimilarity | None = None,
        tau: float | None = None,
        where: Where | Sequence[str] | None = None,
        on_text: OnText | None = None,
        history: Sequence[Message] = (),
    ) -> Answer:
        """Answer ``question`` over the top ``k`` retrieved pages (or the page ids in ``pages``).

        A store without an index answers over all its pages while it has at most ``max_pages``.
        ``verify`` checks each chain-of-evidence step as LAT's attribution reward does (the
        box's crop against the step text, ``similarity`` defaulting to the text layer's overlap).
        ``where`` keeps to the pages whose document metadata it accepts (``retrieve``).
        ``on_text`` is handed each piece of the model's text as it is generated (streaming).
        ``history`` holds the earlier turns of a conversation (text-only user and assistant
        messages, oldest first): retrieval searches for the question with the earlier user turns,
        and the model reads the newest turns before the question (``evidra.conversation``).
        """
        from evidra.conversation import recent, retrieval_query, with_history
        from evidra.models.generation import generate

        if verify and not self.paradigm_name.startswith("coe"):
            raise InvalidInputError(
                f"verify checks chain-of-evidence steps; use paradigm 'coe', not {self.paradigm_name!r}"
            )
        hits, shown = self._pages(retrieval_query(question, history), k, pages, where)
        if not shown:  # nothing in the index scores for the question: say so, ask no model
            return self._no_hits(question)
        sample = Sample(id="ask", question=question, pages=tuple(shown))
        chat = with_history(self.paradigm.build_messages(sample, shown), recent(history))
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
            sources=self._sources(shown),
        )

    def _sources(self, pages: Sequence[Page]) -> tuple[PageMeta, ...]:
        known = self.store.page_meta()
        return tuple(known[p.id] for p in pages if p.id in known)

    def _pages(
        self, question: str, k: int | None, chosen: Sequence[str] | None, where: Where | Sequence[str] | None
    ) -> tuple[list[Hit], list[Page]]:
        if chosen:
            return [], [self.store.get(pid) for pid in chosen]
        if self.retriever is not None:
            hits = self.retrieve(question, k, where)  # BM25 finds nothing when no query term is in the pages
            return hits, [self.store.get(h.page_id) for h in hits]
        allowed = self._allowed(where)
        if allowed is not None and len(allowed) <= self.max_pages:
            return [], [p for p in self.store.pages() if p.id in allowed]
        n = len(self.store) if allowed is None else len(allowed)
        if n == 0:
            raise InvalidInputError(f"store {str(self.store.root)!r} has no pages; run `evidra ingest` first")
        if n > self.max_pages:
            raise InvalidInputError(
                f"store {self.store.root} has {n} pages, more than max_pages {self.max_pages}, and no "
                f"index; build one with `evidra index build --store {self.store.root} --out DIR --encoder "
                "bm25` and pass it (--index DIR), or choose pages with --page ID (see `evidra pages`)"
            )
        return [], self.store.pages()

    def _no_hits(self, question: str) -> Answer:
        where = self.retriever.where if self.retriever is not None else ()
        return Answer(question, None, (), None, (), (), where, "", (), "no_hits", no_hits=True)

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
            box = self._page_box(step.box, page)
            out.append(Citation(i, step.text, page.id if page else None, index, box, **_source(page)))
        return out

    def _answer_citation(self, parsed: Parsed, pages: Sequence[Page]) -> Citation | None:
        if parsed.answer_box is None:
            return None
        index = _page_index(parsed.answer_page, pages)
        page = pages[index] if index is not None else None
        box = self._page_box(parsed.answer_box, page)
        return Citation(0, parsed.answer or "", page.id if page else None, index, box, **_source(page))

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


def _check_refs(model: str | Path, encoder: str | Path) -> None:
    """The model (a checkpoint, hub id, ``tiny:ARCH``, or a training run) and an encoder checkpoint
    given by the caller, checked in a second before a store is opened or a page ingested."""
    from evidra.models.references import check_model_ref, written_as_checkpoint

    check_model_ref(model, "Qwen-VL model", need_config=False)  # a run folder is exported on load
    if str(encoder).strip() and written_as_checkpoint(encoder):
        check_model_ref(encoder, "encoder checkpoint")


def _where(where: Where | Sequence[str] | None) -> Where:
    from evidra.corpus.metadata import Where, parse_where

    return where if isinstance(where, Where) else parse_where(where)


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
    return [verdict_citation(v, pages) for v in verdicts]


def verdict_citation(v: StepVerdict, pages: Sequence[Page]) -> Citation:
    """A verified step (``verify_steps``) as a ``Citation`` of one of the ``pages`` shown."""
    page = pages[v.page_index] if v.page_index is not None and 0 <= v.page_index < len(pages) else None
    return Citation(
        v.index, v.text, v.page_id, v.page_index, v.box, v.score, v.supported, v.reason, **_source(page)
    )


def _source(page: Page | None) -> dict[str, Any]:
    """The ``file`` and ``page_number`` fields of a citation of ``page``."""
    if page is None:
        return {}
    return {"file": page.file_name, "page_number": page.page_number}


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
