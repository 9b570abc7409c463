"""What the BM25 retriever keeps besides the engine: per-page term counts, and the bm25s engine.

bm25s stores each (page, term) pair's finished BM25 score, so idf and the average page length
are baked in; adding or deleting pages changes both, and the engine must be rebuilt from the
pages' term counts. ``TermCounts`` keeps those counts as compact CSR rows (page ``i`` holds
``terms[indptr[i]:indptr[i + 1]]`` with their ``counts``) over one vocabulary, whose ids are
the engine's token ids.

Scoring variant: bm25s ``method="atire"`` gives the term-frequency part ``tf (k1 + 1) /
(tf + k1 (1 - b + b |d| / avgdl))`` and ``idf_method="lucene"`` the non-negative idf
``ln(1 + (N - df + 0.5) / (df + 0.5))``: together the Okapi BM25 evidra has always used. (bm25s
``method="lucene"`` alone drops the ``k1 + 1`` factor, as Lucene 8 does: same ranking, other
scores.)
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import bm25s

METHOD, IDF_METHOD = "atire", "lucene"
SCORE_DTYPE = "float32"


def bm25s_module() -> ModuleType:
    """``bm25s``, imported on first use (``import evidra`` stays light); bm25s ships no types."""
    import bm25s

    # bm25s sets its logger to DEBUG on import, which would print its build notes under any
    # handler without a level (the CLI's); let the application's levels decide instead.
    logging.getLogger("bm25s").setLevel(logging.NOTSET)
    return bm25s


@dataclass(frozen=True, eq=False)
class TermCounts:
    """Term counts of every page, as CSR rows over ``vocab`` (ids are positions in it)."""

    vocab: tuple[str, ...]
    indptr: np.ndarray  # (N + 1,) int64
    terms: np.ndarray  # (nnz,) int32, ids into vocab
    counts: np.ndarray  # (nnz,) int32
    lookup: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "lookup", {t: i for i, t in enumerate(self.vocab)})

    @classmethod
    def empty(cls) -> TermCounts:
        return cls((), np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, np.int32))

    def __len__(self) -> int:
        return len(self.indptr) - 1

    def extend(self, docs: Sequence[Sequence[str]]) -> TermCounts:
        """These pages followed by ``docs`` (token lists); new terms join the end of the vocabulary."""
        lookup = dict(self.lookup)
        rows, tfs, sizes = [], [], []
        for tokens in docs:
            tf = Counter(tokens)
            rows.append(np.array([lookup.setdefault(t, len(lookup)) for t in tf], dtype=np.int32))
            tfs.append(np.array(list(tf.values()), dtype=np.int32))
            sizes.append(len(tf))
        indptr = np.concatenate([self.indptr, self.indptr[-1] + np.cumsum(sizes, dtype=np.int64)])
        return TermCounts(
            tuple(lookup),
            indptr,
            np.concatenate([self.terms, *rows]).astype(np.int32, copy=False),
            np.concatenate([self.counts, *tfs]).astype(np.int32, copy=False),
        )

    def select(self, rows: Sequence[int]) -> TermCounts:
        """Pages ``rows`` only, with the vocabulary reduced to the terms they still use."""
        keep = np.asarray(rows, dtype=np.int64)
        starts, sizes = self.indptr[keep], self.indptr[keep + 1] - self.indptr[keep]
        indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        take = np.arange(indptr[-1]) + np.repeat(starts - indptr[:-1], sizes)  # old entry of each new one
        terms, counts = self.terms[take], self.counts[take]
        used = np.unique(terms)
        remap = np.full(len(self.vocab), -1, np.int32)
        remap[used] = np.arange(len(used), dtype=np.int32)
        return TermCounts(tuple(self.vocab[i] for i in used.tolist()), indptr, remap[terms], counts)

    def token_ids(self) -> list[list[int]]:
        """Each page as a list of token ids with repeats (what bm25s indexes)."""
        if not len(self):
            return []
        flat = np.repeat(self.terms, self.counts)  # (total tokens,)
        return [part.tolist() for part in np.split(flat, np.cumsum(self.lengths())[:-1])]

    def lengths(self) -> np.ndarray:
        """Tokens per page ``(N,)``."""
        per_entry_page = np.repeat(np.arange(len(self)), np.diff(self.indptr))
        return np.bincount(per_entry_page, weights=self.counts, minlength=len(self)).astype(np.int64)


def build_engine(counts: TermCounts, k1: float, b: float) -> bm25s.BM25 | None:
    """A bm25s index of ``counts`` (None when no page has a single token: nothing can match)."""
    if not counts.vocab:
        return None
    engine = bm25s_module().BM25(
        k1=k1,
        b=b,
        method=METHOD,
        idf_method=IDF_METHOD,
        dtype=SCORE_DTYPE,
        backend="numpy",
        csc_backend="numpy",
    )
    engine.index((counts.token_ids(), dict(counts.lookup)), create_empty_token=False, show_progress=False)
    return engine


def top_rows(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows and scores of the ``k`` best positive scores, best first, ties by lower row.

    >>> top_rows(np.array([0.5, 0.0, 2.0, 0.5], dtype=np.float32), 2)
    (array([2, 0]), array([2. , 0.5], dtype=float32))
    """
    rows = np.flatnonzero(scores > 0)
    values = scores[rows]
    if len(rows) > k:  # everything tied with the k-th best stays, so the row order decides ties
        kth = np.partition(values, len(values) - k)[len(values) - k]
        rows, values = rows[values >= kth], values[values >= kth]
    order = np.lexsort((rows, -values))[:k]
    return rows[order], values[order]
