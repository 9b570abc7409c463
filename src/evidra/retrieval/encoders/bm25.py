"""BM25 over the pages' text layer (the OCR/text baseline of ViDoRe and VisRAG), scored by bm25s.

Variant: Okapi BM25 with Lucene's non-negative idf (bm25s ``method="atire"`` with
``idf_method="lucene"``)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over distinct terms t of q:
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``k1 = 1.5`` and ``b = 0.75`` by default. Pages sharing no term with the query score 0
and are not returned, so a search may give fewer than ``k`` hits (none at all for a question
about something no page mentions); equal scores rank the page added first first. Terms are
lower-cased Unicode word runs (``\\w+``) of the NFKC-normalised text, without the language's
stop words and, with ``stem=True``, stemmed (``_bm25_text.Analyzer``; English by default,
``language="none"`` for plain tokens). Pages without a text layer can be OCR'd first
(``evidra.retrieval.ocr``, extra ``evidra[ocr]``).

The engine is the bm25s library: it precomputes every (page, term)
score into a sparse matrix, so a query sums a few columns (scores are float32). evidra keeps the
tokenizer, the per-query exclusions and the tie order, and the pages' term counts, from which
the engine is rebuilt when pages are added or deleted (idf and the average length change).
``save``/``load`` use a folder of JSON and ``.npy`` files (``_bm25_files``), never pickle.

>>> bm25 = BM25Retriever.build({"a": "the red fox", "b": "a blue whale"})
>>> [h.page_id for h in bm25.search(["red fox"], k=1)[0]]
['a']
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from evidra.core.errors import CorpusError, InvalidInputError
from evidra.retrieval.encoders._batching import check_texts
from evidra.retrieval.encoders._bm25_files import IndexFileError, read_index, write_index
from evidra.retrieval.encoders._bm25_params import BM25Params
from evidra.retrieval.encoders._bm25_terms import TermCounts, build_engine, top_rows
from evidra.retrieval.interfaces import Exclude, Hit, check_exclude, check_k

if TYPE_CHECKING:
    import bm25s

__all__ = ["BM25Params", "BM25Retriever"]

# what reading a damaged or foreign index folder raises (json, numpy, zipfile, bm25s)
_UNREADABLE = (OSError, ValueError, KeyError, TypeError, ImportError, IndexFileError, zipfile.BadZipFile)


class BM25Retriever:
    """An in-memory BM25 index of pages; ``save``/``load`` write and read one index directory."""

    def __init__(
        self,
        ids: Sequence[str],
        counts: TermCounts,
        params: BM25Params = BM25Params(),  # noqa: B008 (frozen)
        images: Sequence[str] | None = None,
        *,
        engine: bm25s.BM25 | None = None,
    ) -> None:
        """Pages ``ids`` with their term ``counts``; ``engine`` is a bm25s index already built from them."""
        self.params = params
        self._terms = params.analyzer.terms
        self._set(ids, counts, images, engine)

    def _set(
        self, ids: Sequence[str], counts: TermCounts, images: Sequence[str] | None, engine: bm25s.BM25 | None
    ) -> None:
        if len(ids) != len(counts) or (images is not None and len(images) != len(ids)):
            raise InvalidInputError(f"got {len(ids)} page ids for the term counts of {len(counts)} pages")
        self._ids = list(ids)
        self._images = [os.path.abspath(p) if p else "" for p in images] if images else [""] * len(ids)
        self._counts = counts
        self._engine = engine if engine is not None else build_engine(counts, self.params.k1, self.params.b)
        self._rows = {pid: row for row, pid in enumerate(self._ids)}

    @classmethod
    def build(
        cls,
        texts: Mapping[str, str],
        params: BM25Params = BM25Params(),  # noqa: B008 (frozen)
        images: Mapping[str, str] | None = None,
    ) -> BM25Retriever:
        """Index ``page_id -> text``; ``images`` optionally maps page ids to image paths."""
        ids = list(texts)
        counts = TermCounts.empty().extend([params.analyzer.terms(texts[i]) for i in ids])
        return cls(ids, counts, params, [(images or {}).get(i, "") for i in ids])

    def add(
        self, texts: Mapping[str, str], images: Mapping[str, str] | None = None, *, replace: bool = False
    ) -> None:
        """Add pages ``page_id -> text``; with ``replace`` pages already present are updated."""
        present = [pid for pid in texts if pid in self._rows]
        if present and not replace:
            raise InvalidInputError(f"pages already in the BM25 index: {present[:5]}; pass replace=True")
        keep = self._keep(present)
        new = list(texts)
        counts = self._counts.select(keep).extend([self._terms(texts[i]) for i in new])
        ids = [self._ids[r] for r in keep] + new
        images_now = [self._images[r] for r in keep] + [(images or {}).get(i, "") for i in new]
        self._set(ids, counts, images_now, None)

    def delete(self, page_ids: Sequence[str]) -> int:
        """Remove pages by id; returns how many were present."""
        keep = self._keep(page_ids)
        removed = len(self._ids) - len(keep)
        if removed:
            ids, images = [self._ids[r] for r in keep], [self._images[r] for r in keep]
            self._set(ids, self._counts.select(keep), images, None)
        return removed

    def _keep(self, page_ids: Sequence[str]) -> list[int]:
        drop = set(page_ids)
        return [row for row, pid in enumerate(self._ids) if pid not in drop]

    def __len__(self) -> int:
        return len(self._ids)

    def page_ids(self) -> list[str]:
        return sorted(self._ids)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of ``query`` against every page: ``(N,)`` float32."""
        lookup = self._counts.lookup
        terms = list(dict.fromkeys(lookup[t] for t in self._terms(query) if t in lookup))  # distinct terms
        if not terms or self._engine is None:
            return np.zeros(len(self._ids), dtype=np.float32)
        return np.asarray(self._engine.get_scores_from_ids(terms))

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        check_k(k)
        check_texts(queries)
        excl = check_exclude(exclude, len(queries))
        out = []
        for query, skip in zip(queries, excl, strict=True):
            scores = self.scores(query)
            scores[[self._rows[pid] for pid in skip if pid in self._rows]] = 0.0  # never returned
            rows, values = top_rows(scores, k)
            out.append(
                [
                    Hit(self._ids[r], float(v), self._images[r])
                    for r, v in zip(rows.tolist(), values.tolist(), strict=True)
                ]
            )
        return out

    def save(self, path: str | Path) -> Path:
        """Write the index into directory ``path`` (a new version folder, then the manifest atomically)."""
        return write_index(Path(path), self.params, self._ids, self._images, self._counts, self._engine)

    @classmethod
    def load(cls, path: str | Path) -> BM25Retriever:
        root = Path(path)
        try:
            stored = read_index(root)
            params = stored.params
        except _UNREADABLE as exc:
            raise CorpusError(
                f"cannot read the BM25 index in {str(root)!r} ({exc}); build it again over the same "
                f"pages, into a new folder or after deleting this one: "
                f"`evidra index build --out {root} --encoder bm25`"
            ) from exc
        return cls(stored.ids, stored.counts, params, stored.images, engine=stored.engine)
