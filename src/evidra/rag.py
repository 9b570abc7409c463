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

Any OpenAI-compatible VLM server answers too: ``RAG.load(store, endpoint=URL, model_name=NAME)``
(the key from ``$OPENAI_API_KEY`` or the variable ``api_key_env`` names). ``structured`` (the
default for an endpoint) asks for a JSON answer whose steps cite a page and a box
(``evidra.models.structured``), which parses whatever the model: a general instruct model does
not reliably write a paper's format. Every box a model writes in its own frame lands on page
pixels through its family's convention (``evidra.core.box_formats``: from the checkpoint's config, the
endpoint's model name, or ``box_format``); a box the paradigm already reads as page pixels (LAT's
chain of evidence, whose prompt states each page's size) stays as it is unless ``box_format`` is
given.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, CoordSpace, Message, Page, Parsed, Sample, Step
from evidra.openai.client import DEFAULT_API_KEY_ENV
from evidra.retrieval.interfaces import check_k

if TYPE_CHECKING:
    from evidra.core.box_formats import BoxFormat
    from evidra.corpus.metadata import PageMeta, Where
    from evidra.corpus.store import PageStore
    from evidra.methods.lat.similarity import StepSimilarity, StepVerdict
    from evidra.models.decode import TokenMask
    from evidra.models.endpoint import AnsweringEndpoint
    from evidra.models.generation import SamplingParams
    from evidra.models.grammar import AnswerGrammar
    from evidra.models.loading import VLM
    from evidra.models.streaming import OnText
    from evidra.retrieval.hybrid import Fusion
    from evidra.retrieval.interfaces import Hit
    from evidra.retrieval.lifecycle.attach import StoreRetriever

logger = logging.getLogger(__name__)

DEFAULT_K = 3
DEFAULT_PARADIGM = "coe"  # LAT's chain of evidence: every step cites a page and a box
UNREADABLE = "the model's answer could not be read"  # said instead of an answer that did not parse
DEFAULT_MAX_NEW_TOKENS = 256  # a paradigm's answer: a few short tagged steps
STRUCTURED_MAX_NEW_TOKENS = 1024  # a JSON answer spends ~40 tokens of keys and box per step besides its text


class LoadOptions(TypedDict, total=False):
    """The options of ``RAG.load`` that ``RAG.from_documents`` passes on to it."""

    paradigm: str
    k: int
    max_pages: int
    params: SamplingParams | None
    dtype: str
    device: str
    max_pixels: int | None
    encoder: str | Path
    fusion: Fusion | None
    endpoint: str | None
    model_name: str | None
    api_key_env: str
    structured: bool | None
    box_format: str | None


class _GenerateOptions(TypedDict, total=False):
    """What ``generate`` is given besides the chat: only the options in use."""

    on_text: OnText
    mask: TokenMask


class _SourceFields(TypedDict, total=False):
    file: str
    page_number: int | None


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

    @property
    def parsed(self) -> bool:
        """Whether the model's output held a readable answer (else show it as raw text)."""
        return self.text is not None


class RAG:
    """A page store, an optional retriever over it, a vision-language model (in this process or
    behind an OpenAI-compatible endpoint) and a paradigm.

    ``structured`` asks for a JSON answer instead of the paradigm's format; ``box_format`` is the
    model's box convention (None: chosen from the model); ``box_format_given`` says the user named
    it, so that it applies to boxes the paradigm reads as page pixels too. ``constrained`` decodes
    a structured answer of an in-process model under its grammar (``evidra.models.grammar``), so
    that it always parses."""

    def __init__(
        self,
        store: PageStore,
        vlm: VLM | AnsweringEndpoint,
        retriever: StoreRetriever | None = None,
        *,
        paradigm: str = DEFAULT_PARADIGM,
        k: int = DEFAULT_K,
        max_pages: int = 4,
        params: SamplingParams | None = None,
        keep: tempfile.TemporaryDirectory[str] | None = None,
        structured: bool = False,
        box_format: BoxFormat | None = None,
        box_format_given: bool = False,
        constrained: bool = False,
    ) -> None:
        from evidra.models.endpoint import AnsweringEndpoint
        from evidra.models.generation import SamplingParams
        from evidra.paradigms import PARADIGMS

        check_k(k)
        self.store, self.vlm, self.retriever = store, vlm, retriever
        self.paradigm_name = paradigm
        self.paradigm = PARADIGMS.get(paradigm)()
        self.k, self.max_pages = k, max_pages
        self.params = params or SamplingParams(
            max_new_tokens=default_max_new_tokens(structured), temperature=0.0
        )
        self.structured = structured
        self._box_format = box_format  # None: chosen from the model at the first box
        self.box_format_given = box_format_given
        self.constrained = constrained and structured and not isinstance(vlm, AnsweringEndpoint)
        self._grammar: AnswerGrammar | None = None  # built at the first constrained answer
        self._keep = keep  # a temporary folder holding the store, removed with this object

    @classmethod
    def load(
        cls,
        store: str | Path | PageStore,
        index: str | Path | Sequence[str | Path] | None = None,
        *,
        model: str | Path | None = None,
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
        endpoint: str | None = None,
        model_name: str | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        structured: bool | None = None,
        box_format: str | None = None,
    ) -> RAG:
        """Open ``store`` and ``index`` (None: the store's registered index, if any), load ``model``
        or connect to ``endpoint``.
        ``encoder`` replaces the checkpoint a visual index recorded (the same weights, moved);
        ``fusion`` fuses several indexes (None: z-scores over each one's top 100 hits).

        The paradigm, index and box format are checked before the model loads; ``model`` is a
        directory, a hub id, ``tiny:ARCH``, or a training run or checkpoint folder (exported once,
        as ``evidra ask`` does). ``device`` and ``dtype`` ``auto``: the GPU in bfloat16 when one is
        present. Instead of ``model``: ``endpoint`` (an OpenAI-compatible base URL, ``.../v1``)
        serving ``model_name``, its key in the environment variable ``api_key_env``.
        ``structured`` (default: ``default_structured``, on for an endpoint and a released
        ``-Instruct`` checkpoint, off for others, usually trained on their paradigm's format) asks
        for a JSON answer, which an in-process model writes under its grammar (``structured=True``
        without the ``grammar`` extra is an error; by default it is then used when installed);
        ``box_format`` names the model's box
        convention (``evidra.core.box_formats``; default: chosen from the model).
        """
        from evidra.corpus import PageStore
        from evidra.paradigms import PARADIGMS
        from evidra.retrieval.lifecycle.attach import attach, registered_index

        PARADIGMS.get(paradigm)
        check_k(k)
        fmt = _check_model(model, endpoint, model_name, api_key_env, box_format)
        _check_refs(model, encoder)
        use_json = structured if structured is not None else default_structured(model, endpoint)
        constrained = use_json and endpoint is None and _grammar_wanted(explicit=structured is not None)
        if constrained:  # a budget too small for any constrained answer is said before the model loads
            _check_budget(params)
        opened = store if isinstance(store, PageStore) else PageStore.open(store)
        retriever = None
        read_as = fmt  # the box format boxes are read by (an endpoint's is chosen when it connects)
        try:
            where = _locations(index) if index is not None else [w for w in [registered_index(opened)] if w]
            retriever = attach(where, opened, str(encoder), fusion) if where else None
            if endpoint is not None:
                read_as = fmt or _named_box_format(str(model_name))  # the size pages are sent at too
                vlm: VLM | AnsweringEndpoint = _connect(
                    endpoint, str(model_name), api_key_env, use_json, read_as
                )
            else:
                vlm = _load_local(model, device, dtype, max_pixels)
        except BaseException:
            if retriever is not None:
                retriever.close()
            if opened is not store:  # a store the caller opened stays theirs to close
                opened.close()
            raise
        return cls(
            opened,
            vlm,
            retriever,
            paradigm=paradigm,
            k=k,
            max_pages=max_pages,
            params=params,
            keep=keep,
            structured=use_json,
            box_format=read_as,
            box_format_given=fmt is not None,
            constrained=constrained,
        )

    @classmethod
    def from_documents(
        cls,
        documents: str | Path,
        *,
        model: str | Path | None = None,
        retriever: str = "bm25",
        encoder_model: str | Path = "",
        store: str | Path | None = None,
        index: str | Path | None = None,
        dpi: float = 150.0,
        **load_options: Unpack[LoadOptions],
    ) -> RAG:
        """Ingest ``documents`` into ``store``, index it with ``retriever``, and ``load`` the result.

        ``retriever`` is an encoder name of ``evidra index build`` (``bm25``, or ``colqwen2`` /
        ``colpali`` / ``dse`` with ``encoder_model`` its checkpoint directory). Without ``store``
        the pages go to a temporary folder removed with the returned object; ``index`` defaults to
        ``<store>/index-<retriever>``. Both are reused when they exist: only new pages are added.
        """
        from evidra.corpus import PageStore, ingest

        endpoint, model_name = load_options.get("endpoint"), load_options.get("model_name")
        key_env = load_options.get("api_key_env", DEFAULT_API_KEY_ENV)
        _check_model(model, endpoint, model_name, key_env, load_options.get("box_format"))
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
        return self.retriever.retrieve(question, k, _where(where))

    def _allowed(self, where: Where | Sequence[str] | None) -> set[str] | None:
        """The page ids ``where`` accepts (None: no filter); none at all is an error naming it."""
        from evidra.retrieval.lifecycle.attach import allowed_pages

        return allowed_pages(self.store, _where(where))

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
        and the model reads the newest turns before the question (``evidra.core.conversation``).
        """
        from evidra.core.conversation import recent, retrieval_query, with_history

        if verify and not (self.structured or self.paradigm_name.startswith("coe")):
            raise InvalidInputError(
                f"verify checks cited steps; use paradigm 'coe' or a structured answer, not "
                f"{self.paradigm_name!r}"
            )
        hits, shown = self._pages(retrieval_query(question, history), k, pages, where)
        if not shown:  # nothing in the index scores for the question: say so, ask no model
            return self._no_hits(question)
        chat = with_history(self._messages(question, shown), recent(history))
        text, finish_reason = self._write(chat, on_text, len(shown))
        parsed = self._parse(text, shown)
        placed, box_errors = self._on_pages(parsed, shown)
        steps = self._citations(placed, shown)
        if verify:
            steps = _verified(placed, shown, similarity, tau)
        return Answer(
            question=question,
            text=parsed.answer,
            steps=tuple(steps),
            answer_box=self._answer_citation(placed, shown),
            pages=tuple(shown),
            retrieved=tuple(hits),
            index=self.retriever.where if hits and self.retriever is not None else (),
            output=text,
            errors=(*parsed.errors, *box_errors),
            finish_reason=finish_reason,
            verified=verify,
            sources=self._sources(shown),
        )

    def _messages(self, question: str, shown: Sequence[Page]) -> list[Message]:
        from evidra.models import structured

        if self.structured:
            return structured.build_messages(question, shown)
        return self.paradigm.build_messages(Sample(id="ask", question=question, pages=tuple(shown)), shown)

    def _parse(self, text: str, shown: Sequence[Page]) -> Parsed:
        from evidra.models import structured

        return structured.parse(text, [p.id for p in shown]) if self.structured else self.paradigm.parse(text)

    def _write(self, chat: list[Message], on_text: OnText | None, pages: int) -> tuple[str, str]:
        """The model's text for ``chat`` (showing ``pages`` images) and why it stopped, from this
        process (under the answer's grammar when ``constrained``) or the endpoint."""
        from evidra.models.endpoint import AnsweringEndpoint
        from evidra.models.generation import generate

        p = self.params
        if isinstance(self.vlm, AnsweringEndpoint):
            done = self.vlm.write(
                chat, max_tokens=p.max_new_tokens, temperature=p.temperature, stop=p.stop, on_text=on_text
            )
            return done.text, done.finish_reason
        mask = self._answer_mask(pages)
        extra: _GenerateOptions = {"on_text": on_text} if on_text is not None else {}
        if mask is not None:
            extra["mask"] = mask
        (gen,) = generate(self.vlm, [chat], p, **extra)
        return gen.text, gen.finish_reason

    def _answer_mask(self, pages: int) -> TokenMask | None:
        """A fresh grammar mask for one constrained answer citing ``pages`` images, else None."""
        from evidra.models.endpoint import AnsweringEndpoint
        from evidra.models.grammar import AnswerGrammar, AnswerLimits

        if not self.constrained or isinstance(self.vlm, AnsweringEndpoint):
            return None
        if self._grammar is None:
            self._grammar = AnswerGrammar.for_model(self.vlm)
        return self._grammar.mask(AnswerLimits.for_budget(self.params.max_new_tokens, pages))

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
        return no_hits(question, self.retriever.where if self.retriever is not None else ())

    @property
    def box_format(self) -> BoxFormat:
        """The model's box convention: the one given, else its family's (``evidra.core.box_formats``)."""
        if self._box_format is None:
            self._box_format = _model_box_format(self.vlm)
        return self._box_format

    def _page_box(self, box: Box | None, page: Page | None) -> tuple[Box | None, str | None]:
        """``box`` in page pixels of ``page``, or None and why. A box the paradigm reads as page
        pixels stays as it is unless the user named a box format; any other goes through the
        model's format (``evidra.core.box_formats``)."""
        from evidra.core.geometry import model_input_size

        if box is None or page is None:  # a page not shown: verify says so, the citation drops the box
            return box, None
        if box.space is CoordSpace.PAGE and not self.box_format_given:
            return box, None
        spec = getattr(self.vlm, "spec", None)  # an in-process model: its processor's own resize
        seen = model_input_size(page.width, page.height, spec) if spec is not None else None
        if self.box_format.space is not CoordSpace.MODEL:
            seen = None
        mapped = self.box_format.to_page(box.as_tuple(), (page.width, page.height), seen)
        return mapped.box, mapped.error

    def _on_pages(self, parsed: Parsed, pages: Sequence[Page]) -> tuple[Parsed, list[str]]:
        """``parsed`` with every box in page pixels of the page it cites (a box that cannot be
        placed is dropped, and said why)."""
        errors: list[str] = []

        def place(box: Box | None, index: int | None, what: str) -> Box | None:
            page_at = _page_index(index, pages)
            placed, error = self._page_box(box, pages[page_at] if page_at is not None else None)
            if error:
                errors.append(f"{what}: {error}")
            return placed

        steps = [
            Step(s.text, s.page_index, place(s.box, s.page_index, f"step {i}"))
            for i, s in enumerate(parsed.steps, 1)
        ]
        answer_box = place(parsed.answer_box, parsed.answer_page, "answer")
        return replace(parsed, steps=tuple(steps), answer_box=answer_box), errors

    def _citations(self, parsed: Parsed, pages: Sequence[Page]) -> list[Citation]:
        """The steps of ``parsed`` (boxes already in page pixels) as citations of ``pages``."""
        out = []
        for i, step in enumerate(parsed.steps, 1):
            index = _page_index(step.page_index, pages)
            page = pages[index] if index is not None else None
            box = step.box if page is not None else None
            out.append(Citation(i, step.text, page.id if page else None, index, box, **_source(page)))
        return out

    def _answer_citation(self, parsed: Parsed, pages: Sequence[Page]) -> Citation | None:
        if parsed.answer_box is None:
            return None
        index = _page_index(parsed.answer_page, pages)
        page = pages[index] if index is not None else None
        box = parsed.answer_box if page is not None else None
        return Citation(0, parsed.answer or "", page.id if page else None, index, box, **_source(page))

    def close(self) -> None:
        from evidra.models.endpoint import AnsweringEndpoint

        if isinstance(self.vlm, AnsweringEndpoint):
            self.vlm.close()
        if self.retriever is not None:
            self.retriever.close()
        self.store.close()
        if self._keep is not None:
            self._keep.cleanup()

    def __enter__(self) -> RAG:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def no_hits(question: str, index: Sequence[str]) -> Answer:
    """The answer when the index at ``index`` found no page for ``question``: no model was asked."""
    return Answer(question, None, (), None, (), (), tuple(index), "", (), "no_hits", no_hits=True)


def _check_model(
    model: str | Path | None,
    endpoint: str | None,
    model_name: str | None,
    api_key_env: str,
    box_format: str | None,
) -> BoxFormat | None:
    """One model: a checkpoint or an endpoint with its model name; the key variable and the box
    format named, checked before anything opens. The named box format, if any."""
    from evidra.core.box_formats import BOX_FORMATS
    from evidra.openai.client import check_api_key_env

    if (model is None) == (endpoint is None):
        raise InvalidInputError(
            "give a model: model=PATH (a checkpoint) or endpoint=URL with model_name=NAME, not both"
        )
    if endpoint is not None:
        if not model_name:
            raise InvalidInputError(
                f"endpoint {endpoint!r} needs model_name: the name of the model it serves"
            )
        check_api_key_env(api_key_env, "api_key_env")
    return BOX_FORMATS.get(box_format.strip().lower()) if box_format is not None else None


def default_structured(model: str | Path | None, endpoint: str | None) -> bool:
    """Whether to ask for a structured answer when the caller did not say: yes for an endpoint and
    for a general instruct checkpoint (its name ends in ``-Instruct``, as released), no for any other
    checkpoint (a trained one writes its paradigm's format).

    >>> default_structured(None, "http://h/v1"), default_structured("Qwen/Qwen2.5-VL-7B-Instruct", None)
    (True, True)
    >>> default_structured("runs/lat-7b/checkpoint-200", None), default_structured("tiny:qwen2_5_vl", None)
    (False, False)
    """
    if endpoint is not None:
        return True
    name = Path(str(model)).name.lower() if model is not None else ""
    return name.endswith("instruct")


def default_max_new_tokens(structured: bool) -> int:
    """Tokens an answer may have when the caller names no number: room for several cited steps of
    a structured JSON answer (256 leaves room for about one), else the paradigm's 256.

    >>> default_max_new_tokens(True), default_max_new_tokens(False)
    (1024, 256)
    """
    return STRUCTURED_MAX_NEW_TOKENS if structured else DEFAULT_MAX_NEW_TOKENS


def _check_budget(params: SamplingParams | None) -> None:
    from evidra.models.grammar import AnswerLimits

    budget = params.max_new_tokens if params is not None else default_max_new_tokens(True)
    AnswerLimits.for_budget(budget, pages=1)


def _grammar_wanted(explicit: bool) -> bool:
    """Whether an in-process structured answer is decoded under its grammar: always when asked
    for (xgrammar missing is then an error naming the extra), else when xgrammar is installed."""
    from evidra.models.grammar import grammar_available, require_xgrammar

    if explicit:
        require_xgrammar()
        return True
    if grammar_available():
        return True
    logger.warning("structured answers are decoded without a grammar: pip install 'evidra[grammar]'")
    return False


def _connect(
    endpoint: str, model_name: str, api_key_env: str, structured: bool, box_format: BoxFormat
) -> AnsweringEndpoint:
    """The server at ``endpoint``; its pages go at the resolution of ``box_format``'s family, the
    frame its pixel boxes are read in (``BoxFormat.seen_size``)."""
    from evidra.models.endpoint import AnsweringEndpoint, ChatEndpoint

    chat = ChatEndpoint.for_model(endpoint, model_name, box_format, api_key_env=api_key_env)
    return AnsweringEndpoint(chat, structured=structured)


def _named_box_format(model_name: str) -> BoxFormat:
    from evidra.core.box_formats import box_format_for

    return box_format_for(model_name, None, None)


def _load_local(model: str | Path | None, device: str, dtype: str, max_pixels: int | None) -> VLM:
    from evidra.core.devices import resolve_device, resolve_dtype
    from evidra.models.loading import load_vlm
    from evidra.rl.runs.export import resolve_trained_model

    assert model is not None  # _check_model: a model or an endpoint
    where = resolve_device(device)
    return load_vlm(
        resolve_trained_model(model), dtype=resolve_dtype(dtype, where), device=where, max_pixels=max_pixels
    )


def _model_box_format(vlm: VLM | AnsweringEndpoint) -> BoxFormat:
    """The box convention of ``vlm``: from a checkpoint's architecture, or the endpoint's model name."""
    from evidra.core.box_formats import box_format_for
    from evidra.models.endpoint import AnsweringEndpoint

    if isinstance(vlm, AnsweringEndpoint):
        return box_format_for(vlm.name, None, None)
    return box_format_for(None, {"model_type": getattr(vlm, "arch", None)}, None)


def _check_refs(model: str | Path | None, encoder: str | Path) -> None:
    """The model (a checkpoint, hub id, ``tiny:ARCH``, or a training run) and an encoder checkpoint
    given by the caller, checked in a second before a store is opened or a page ingested."""
    from evidra.models.references import check_model_ref, written_as_checkpoint

    if model is not None:  # a run folder is exported on load
        check_model_ref(model, "Qwen-VL model", need_config=False)
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
    from evidra.methods.lat.similarity import LAT_TAU, TextOverlapSimilarity, verify_steps

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


def _source(page: Page | None) -> _SourceFields:
    """The ``file`` and ``page_number`` fields of a citation of ``page``."""
    if page is None:
        return {}
    return {"file": page.file_name, "page_number": page.page_number}


def _build_or_update(store: PageStore, out: Path, encoder: str, encoder_model: str | Path) -> None:
    from evidra.retrieval.lifecycle.index_folder import MANIFEST, build_index, open_index

    if (out / MANIFEST).is_file():
        with open_index(out) as engine:
            have = set(engine.index.page_ids())
            new = [p for p in store.pages() if p.id not in have]
            if new:
                engine.add(new)
        return
    build_index(store.pages(), out, encoder, encoder_model).close()
