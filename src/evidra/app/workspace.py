"""A page store, its index and (optionally) a model, shared by the web app and the MCP server.

SQLite connections and the model stay on the thread that opened them, so a ``Workspace`` owns
three worker threads: the *data* thread holds the store and the index (documents, pages, search,
``index add``), the *model* thread holds the ``RAG`` that answers (with its own read-only store
connection), and the *ingest* thread of ``uploads`` (``evidra.app.uploads``) ingests uploaded
files with a store connection of its own. A search therefore answers while the model is writing
an answer or a large upload is being ingested: the store's SQLite file is switched to WAL mode
when the workspace opens it, so readers see the last committed state while a file's pages are
written. The index is the one given, else the one registered in the store, else
``<store>/index-bm25``, built when the first documents arrive; several indexes or a
``serve-index`` URL (``SearchSpec``) are opened and fused as ``evidra ask`` does
(``evidra.retrieval.lifecycle.attach``), and then uploaded pages are stored but not indexed. Every search
goes through ``StoreRetriever.retrieve``, the one retrieval path of ``RAG`` and ``evidra ask``,
with the workspace's metadata filter. Every method is async and runs its work on the owning
thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TypeVar, TypeVarTuple, Unpack

from evidra.app.errors import Busy, NotFound, Unsupported
from evidra.app.uploads import Uploads, remove_leftovers
from evidra.core.errors import InvalidInputError
from evidra.openai.client import DEFAULT_API_KEY_ENV

if TYPE_CHECKING:
    from evidra.core.types import Message, Page
    from evidra.corpus.conversations import Conversations
    from evidra.corpus.metadata import Where
    from evidra.corpus.store import PageStore
    from evidra.models.streaming import OnText
    from evidra.rag import RAG, Answer
    from evidra.retrieval.hybrid import Fusion
    from evidra.retrieval.interfaces import Hit
    from evidra.retrieval.lifecycle.attach import StoreRetriever
    from evidra.retrieval.lifecycle.index_folder import Engine

logger = logging.getLogger(__name__)

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
DEFAULT_INDEX = "index-bm25"
SAFE_PART = re.compile(r"[^A-Za-z0-9._ ()+-]+")
MAX_NAME = 120  # characters per path part of an uploaded file's name
MAX_WAITING_ASKS = 8  # questions answered or waiting for the model at once (503 beyond)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
IMAGE_TYPES = (  # the raster kinds a page image is served as, told by their first bytes
    (PNG_MAGIC, "image/png"),  # what the page store writes
    (b"\xff\xd8\xff", "image/jpeg"),
)


@dataclass(frozen=True)
class ModelSpec:
    """What ``RAG.load`` needs to answer; ``path`` as ``evidra ask --model`` takes it, or
    ``endpoint`` and ``model_name`` for an OpenAI-compatible server (``path`` then "")."""

    path: str
    paradigm: str = "coe"
    max_new_tokens: int | None = None  # None: by the answer's mode (``rag.default_max_new_tokens``)
    device: str = "auto"
    dtype: str = "auto"
    max_pixels: int | None = None
    endpoint: str | None = None
    model_name: str | None = None
    api_key_env: str = DEFAULT_API_KEY_ENV
    structured: bool | None = None  # None: on for an endpoint, off for a checkpoint
    box_format: str | None = None  # None: chosen from the model


@dataclass(frozen=True)
class SearchSpec:
    """How a workspace retrieves, as ``evidra ask`` does (``evidra.cli._retrieval``): ``indexes``
    are directories or ``serve-index`` URLs (none: the store's own; two or more: fused by
    ``fusion``), ``encoder`` the checkpoint of a moved visual index, ``where`` the metadata
    filter every search and answer keeps to (``["file=a.pdf"]``)."""

    indexes: tuple[str, ...] = ()
    fusion: Fusion | None = None
    encoder: str = ""
    where: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    source: str  # the file name (with its folder) the pages came from
    pages: int
    first_page: str  # page id of its first page


@dataclass(frozen=True)
class PageImage:
    """A page's image file and the media type its first bytes show."""

    path: Path
    media_type: str


def image_type(head: bytes) -> str | None:
    """The media type of an image that starts with ``head``: PNG, JPEG or WebP, else ``None``
    (an SVG or HTML file is never served as what its name says).

    >>> image_type(PNG_MAGIC + b"...."), image_type(b"RIFF1234WEBPVP8 "), image_type(b"<svg")
    ('image/png', 'image/webp', None)
    """
    for magic, media_type in IMAGE_TYPES:
        if head.startswith(magic):
            return media_type
    return "image/webp" if head[:4] == b"RIFF" and head[8:12] == b"WEBP" else None


class AskTicket:
    """A place among the ``MAX_WAITING_ASKS`` questions, taken before a streamed reply starts (so
    a full server answers 503, not a stream that ends in an error) and freed once the reply and
    the answer behind it have both let go of it."""

    def __init__(self, free: Callable[[], None]) -> None:
        self._holders = 1
        self._free: Callable[[], None] | None = free

    def hold(self) -> None:
        self._holders += 1

    def drop(self) -> None:
        """One holder lets go; the place is freed once, when the last one has."""
        self._holders -= 1
        if self._holders <= 0 and self._free is not None:
            free, self._free = self._free, None
            free()


def upload_name(name: str) -> str:
    """A relative path safe to write under a fresh folder: each part stripped of odd characters.

    >>> upload_name("../../etc/x.pdf"), upload_name("reports/Q3 (final).pdf"), upload_name("a\\\\b.png")
    ('etc/x.pdf', 'reports/Q3 (final).pdf', 'a/b.png')
    """
    parts = [SAFE_PART.sub("_", p).strip(" .")[:MAX_NAME] for p in re.split(r"[\\/]+", name)]
    parts = [p for p in parts if p and p not in (".", "..")]
    if not parts:
        raise InvalidInputError(f"upload name {name[:80]!r} names no file; send ?name=<file name>.pdf")
    return str(PurePosixPath(*parts[-4:]))  # at most three folders deep


def ingestible_name(name: str) -> str:
    """``upload_name(name)``, refused (``Unsupported``) unless its suffix is one ingest reads.

    >>> ingestible_name("a/report.PDF")
    'a/report.PDF'
    >>> ingestible_name("page.svg")
    Traceback (most recent call last):
    evidra.app.errors.Unsupported: 'page.svg' is not a document evidra reads; upload .bmp, .jpeg, ...
    """
    from evidra.corpus.ingest import SUPPORTED_SUFFIXES

    safe = upload_name(name)
    if PurePosixPath(safe).suffix.lower() not in SUPPORTED_SUFFIXES:
        kinds = ", ".join(sorted(SUPPORTED_SUFFIXES))
        raise Unsupported(f"{safe[:80]!r} is not a document evidra reads; upload {kinds} files")
    return safe


class Workspace:
    """See the module docstring. ``start`` opens everything; ``close`` releases it."""

    def __init__(
        self,
        store: str | Path,
        index: str | Path | None = None,
        model: ModelSpec | None = None,
        search: SearchSpec | None = None,
    ) -> None:
        from evidra.corpus.metadata import parse_where

        self.store_root = Path(store).expanduser().resolve()
        search = search or SearchSpec()
        if index is not None:
            search = replace(search, indexes=(str(index), *search.indexes))
        self.search_spec = search
        self.where: Where = parse_where(search.where)  # a malformed filter fails before anything opens
        self.model = model
        self._data = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evidra-data")
        self._model = ThreadPoolExecutor(max_workers=1, thread_name_prefix="evidra-model")
        self._store: PageStore | None = None  # data thread only
        self._engine: Engine | None = None  # data thread only: the one index pages are added to
        self._attached: StoreRetriever | None = None  # data thread only: indexes fused or served
        self._kept: Conversations | None = None  # data thread only: the store's conversations
        self._rag: RAG | None = None  # model thread only
        self.index_root: Path | None = None
        self._asking = 0  # questions between arrival and answer (event-loop side)
        self.uploads = Uploads(self.store_root, self._index_new_waited)

    # -- life ----------------------------------------------------------------------------------

    async def start(self) -> None:
        await self._on_data(self._open)
        if self.model is not None:
            await self._on_model(self._load_model, self.model)

    def start_sync(self) -> None:
        self._data.submit(self._open).result()
        if self.model is not None:
            self._model.submit(self._load_model, self.model).result()

    def close(self) -> None:
        self.uploads.close()  # first: a job's last step runs on the data thread
        self._model.submit(self._close_model).result()
        self._data.submit(self._close_data).result()
        self._model.shutdown()
        self._data.shutdown()

    @property
    def can_answer(self) -> bool:
        return self.model is not None

    @property
    def waiting_asks(self) -> int:
        """Questions being answered or waiting for the model (at most ``MAX_WAITING_ASKS``)."""
        return self._asking

    # -- what the app calls -------------------------------------------------------------------

    async def documents(self) -> list[Document]:
        return await self._on_data(self._documents)

    async def pages_of(self, source: str) -> list[Page]:
        return await self._on_data(self._pages_of, source)

    async def page(self, page_id: str) -> Page:
        return await self._on_data(self._page, page_id)

    async def image_file(self, page_id: str) -> PageImage:
        """The page's image with its media type, refused (``NotFound``) unless it is a file inside
        the store folder whose first bytes are a PNG, JPEG or WebP image."""
        return self.image_of(await self.page(page_id))

    def image_of(self, page: Page) -> PageImage:
        """``image_file`` of a page already read (any thread: it reads only the file)."""
        path = Path(page.image_path).resolve()
        if not path.is_relative_to(self.store_root) or not path.is_file():
            raise NotFound(f"page {page.id!r} has no image inside the store")
        with path.open("rb") as f:
            media_type = image_type(f.read(16))
        if media_type is None:
            raise NotFound(f"the image of page {page.id!r} is not a PNG, JPEG or WebP file; ingest it again")
        return PageImage(path, media_type)

    async def search(self, query: str, k: int) -> list[tuple[Hit, Page]]:
        return await self._on_data(self._search, query, k)

    async def with_kept(self, fn: Callable[[PageStore, Conversations], T]) -> T:
        """``fn`` over the page store and its kept conversations, on the data thread."""

        def run() -> T:
            assert self._kept is not None, "the workspace is not started"
            return fn(self._opened(), self._kept)

        return await self._on_data(run)

    @property
    def index_where(self) -> tuple[str, ...]:
        """Where pages are retrieved from: the index folder, or the indexes and URLs fused."""
        if self._attached is not None:
            return self._attached.where
        return (str(self.index_root),) if self.index_root is not None else ()

    async def index_new(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Add the store's pages the index lacks (building the default index first if none), once
        the uploads queued before have ended (only the ingest thread writes pages)."""
        return await self.uploads.after_jobs(self._index_new_waited, progress)

    def admit(self) -> AskTicket:
        """A place among the questions answered or waiting, or ``Busy`` (with ``InvalidInputError``
        first when there is no model)."""
        if self.model is None:
            raise InvalidInputError(
                "this server has no model; start it with --model or --endpoint to ask questions"
            )
        if self._asking >= MAX_WAITING_ASKS:
            raise Busy(f"{self._asking} questions are being answered; ask again in a moment")
        self._asking += 1

        def free() -> None:
            self._asking -= 1

        return AskTicket(free)

    async def ask(
        self,
        question: str,
        k: int,
        on_text: OnText | None = None,
        *,
        on_pages: Callable[[list[tuple[Hit, Page]]], None] | None = None,
        history: Sequence[Message] = (),
        ticket: AskTicket | None = None,
    ) -> Answer:
        """Retrieve the top ``k`` pages (data thread), hand them to ``on_pages``, then answer over
        them (model thread), handing each piece of text to ``on_text`` as it is written.
        ``history`` holds the earlier turns of the conversation: retrieval searches for the
        question with the earlier user turns, the model reads them (``evidra.core.conversation``).
        ``ticket`` is a place taken by ``admit`` (one is taken here, or ``Busy``, without it)."""
        from evidra.core.conversation import retrieval_query
        from evidra.rag import no_hits

        if ticket is None:
            ticket = self.admit()
        else:
            ticket.hold()
        try:
            found = await self.search(retrieval_query(question, history), k)
            if not found:  # as RAG.ask says it: nothing in the index scores, no model is asked
                return no_hits(question, self.index_where)
            if on_pages is not None:
                on_pages(found)
            ids = [page.id for _, page in found]
            answer = await self._on_model(self._ask, question, ids, on_text, tuple(history))
        finally:
            ticket.drop()
        return replace(answer, retrieved=tuple(hit for hit, _ in found), index=self.index_where)

    # -- on the data thread --------------------------------------------------------------------

    async def _on_data(self, fn: Callable[[Unpack[Ts]], T], *args: Unpack[Ts]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._data, fn, *args)

    async def _on_model(self, fn: Callable[[Unpack[Ts]], T], *args: Unpack[Ts]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._model, fn, *args)

    def _open(self) -> None:
        from evidra.corpus.conversations import Conversations
        from evidra.corpus.store import PageStore
        from evidra.retrieval.lifecycle.attach import attach, is_url

        self._store = PageStore.create(self.store_root)
        _write_ahead_log(self.store_root)
        self._kept = Conversations(self.store_root)
        removed = remove_leftovers()
        if removed:
            logger.info("removed %d upload folders of servers that no longer run", removed)
        spec = self.search_spec
        if len(spec.indexes) > 1 or any(is_url(i) for i in spec.indexes):
            self._attached = attach(spec.indexes, self._store, spec.encoder, spec.fusion)
        else:
            self._open_own(spec)

    def _open_own(self, spec: SearchSpec) -> None:
        """The one index folder uploads are added to: given, registered, or ``DEFAULT_INDEX``."""
        from evidra.retrieval.lifecycle.attach import registered_index
        from evidra.retrieval.lifecycle.index_folder import MANIFEST, open_index

        if spec.fusion is not None:
            raise InvalidInputError("fusion options apply to two or more indexes; pass another --index")
        registered = registered_index(self._opened())
        given = Path(spec.indexes[0]).expanduser().resolve() if spec.indexes else None
        root = given or (Path(registered) if registered else self.store_root / DEFAULT_INDEX)
        self.index_root = root
        if (root / MANIFEST).is_file():
            self._engine = open_index(root, encoder_path=spec.encoder or None)
        elif given is not None and root.exists() and any(root.iterdir()):
            raise InvalidInputError(
                f"{str(root)!r} holds no index; pass an `evidra index build` folder or a new path"
            )

    def _close_data(self) -> None:
        if self._kept is not None:
            self._kept.close()
        if self._attached is not None:
            self._attached.close()
        if self._engine is not None:
            self._engine.close()
        if self._store is not None:
            self._store.close()

    def _opened(self) -> PageStore:
        assert self._store is not None, "the workspace is not started"
        return self._store

    def _documents(self) -> list[Document]:
        by_source: dict[str, list[Page]] = {}
        for page in self._opened().pages(with_words=False):
            by_source.setdefault(page.source or page.id, []).append(page)
        docs = []
        for source, pages in sorted(by_source.items()):
            first = min(pages, key=lambda p: p.page_number)
            docs.append(Document(source, len(pages), first.id))
        return docs

    def _pages_of(self, source: str) -> list[Page]:
        pages = [p for p in self._opened().pages(with_words=False) if (p.source or p.id) == source]
        if not pages:
            raise NotFound(f"no document {source[:80]!r} in the store")
        return sorted(pages, key=lambda p: p.page_number)

    def _page(self, page_id: str) -> Page:
        store = self._opened()
        if page_id not in store:
            raise NotFound(f"no page {page_id[:80]!r} in the store")
        return store.get(page_id, with_words=False)

    def _retriever(self) -> StoreRetriever | None:
        """The indexes fused or served, else the workspace's own index (None before it exists)."""
        from evidra.retrieval.lifecycle.attach import StoreRetriever

        if self._attached is not None:
            return self._attached
        if self._engine is None:
            return None
        return StoreRetriever(self._opened(), self.index_where, self._engine.retriever)

    def _search(self, query: str, k: int) -> list[tuple[Hit, Page]]:
        retriever = self._retriever()
        if retriever is None:
            return []
        hits = retriever.retrieve(query, k, self.where)
        store = self._opened()
        return [(h, store.get(h.page_id)) for h in hits]  # with words: the app marks where it matched

    def _index_new_waited(self, progress: Callable[[int, int], None] | None) -> int:
        """``_index_new`` on the data thread, waited for (from the ingest thread)."""
        return self._data.submit(self._index_new, progress).result()

    def _index_new(self, progress: Callable[[int, int], None] | None) -> int:
        from evidra.retrieval.lifecycle.index_folder import build_index

        store = self._opened()
        if self._attached is not None:
            raise InvalidInputError(
                f"this server searches {', '.join(self._attached.where)}, which it does not add pages to; "
                "add them with `evidra index add --index DIR --store S` to each and restart it"
            )
        have = set(self._engine.index.page_ids()) if self._engine is not None else set()
        new = [p for p in store.pages() if p.id not in have]
        if not new:
            return 0
        done = 0

        def tick(n: int) -> None:
            nonlocal done
            done += n
            if progress is not None:
                progress(done, len(new))

        assert self.index_root is not None
        if self._engine is None:
            self._engine = build_index(new, self.index_root, "bm25", progress=tick)
            store.register_index(self.index_root)
        else:
            self._engine.add(new, progress=tick)
        return len(new)

    # -- on the model thread -------------------------------------------------------------------

    def _load_model(self, spec: ModelSpec) -> None:
        from evidra.models.generation import SamplingParams
        from evidra.rag import RAG

        given = spec.max_new_tokens
        params = SamplingParams(max_new_tokens=given, temperature=0.0) if given is not None else None
        self._rag = RAG.load(
            self.store_root,
            [],
            model=spec.path or None,
            paradigm=spec.paradigm,
            params=params,
            device=spec.device,
            dtype=spec.dtype,
            max_pixels=spec.max_pixels,
            endpoint=spec.endpoint,
            model_name=spec.model_name,
            api_key_env=spec.api_key_env,
            structured=spec.structured,
            box_format=spec.box_format,
        )

    def _close_model(self) -> None:
        if self._rag is not None:
            self._rag.close()

    def _ask(
        self, question: str, page_ids: Sequence[str], on_text: OnText | None, history: Sequence[Message]
    ) -> Answer:
        assert self._rag is not None, "the workspace has no model"
        return self._rag.ask(question, pages=list(page_ids), on_text=on_text, history=history)


def _write_ahead_log(store_root: Path) -> None:
    """Switch the store's SQLite file to WAL mode (it stays so): the ingest thread's long write of
    a large file then never blocks the data thread's reads, which see the last commit."""
    from evidra.corpus.store import DB_NAME

    try:
        with contextlib.closing(sqlite3.connect(store_root / DB_NAME)) as conn:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
    except sqlite3.Error as exc:
        mode = str(exc)
    if str(mode).lower() != "wal":
        logger.warning(
            "the page store %s stays in %s mode: searches wait while an upload is written", store_root, mode
        )
