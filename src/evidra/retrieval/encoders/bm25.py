"""BM25 over the pages' text layer (the OCR/text baseline of ViDoRe and VisRAG).

Variant: Okapi BM25 with Lucene's non-negative idf (as bm25s ``method="lucene"``)::

    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))
    score(q, d) = sum over distinct terms t of q:
                  idf(t) * tf(t, d) * (k1 + 1) / (tf(t, d) + k1 * (1 - b + b * |d| / avgdl))

with ``k1 = 1.5`` and ``b = 0.75`` by default. Pages sharing no term with the query score 0
and are not returned, so a search may give fewer than ``k`` hits. Tokens are lower-cased Unicode word runs
(``\\w+``) of the NFKC-normalised text; no stemming or stop words, so results do not depend on a
language pack. Pages without a text layer can be OCR'd first (``evidra.retrieval.ocr``, extra
``evidra[ocr]``).

>>> bm25 = BM25Retriever.build({"a": "the red fox", "b": "a blue whale"})
>>> [h.page_id for h in bm25.search(["red fox"], k=1)[0]]
['a']
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from evidra.errors import CorpusError, InvalidInputError
from evidra.retrieval.base import Exclude, Hit, check_exclude, check_k
from evidra.retrieval.encoders._batching import check_texts

_TOKEN = re.compile(r"\w+", re.UNICODE)
FILE_NAME = "bm25.json"


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens of the NFKC-normalised text.

    NFKC spells out ligature characters (U+FB01 "ﬁ" -> "fi"), which OCR engines emit, and
    composes accents, so a page and a query typed differently still share their words.

    >>> tokenize("Orion's budget: 1,987 EUR")
    ['orion', 's', 'budget', '1', '987', 'eur']
    >>> tokenize("Speci\ufb01cation")
    ['specification']
    """
    return _TOKEN.findall(unicodedata.normalize("NFKC", text).lower())


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5
    b: float = 0.75

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0:
            raise InvalidInputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")


class BM25Retriever:
    """An in-memory inverted index; ``save``/``load`` write one JSON file atomically."""

    def __init__(
        self,
        ids: Sequence[str],
        docs: Sequence[Counter[str]],
        params: BM25Params = BM25Params(),
        images: Sequence[str] | None = None,
    ) -> None:
        self.params = params
        self._ids = list(ids)
        self._images = list(images) if images is not None else [""] * len(ids)
        self._docs = list(docs)
        self._reindex()

    def _reindex(self) -> None:
        """Recompute lengths, idf and postings (cheap: one pass over the token counts)."""
        k1, b, n = self.params.k1, self.params.b, len(self._docs)
        lengths = np.array([sum(d.values()) for d in self._docs], dtype=np.float64)
        avgdl = float(lengths.mean()) if n and lengths.mean() > 0 else 1.0
        self._norm = k1 * (1 - b + b * lengths / avgdl)  # (N,)
        postings: dict[str, tuple[list[int], list[int]]] = {}
        for row, doc in enumerate(self._docs):
            for term, tf in doc.items():
                rows, tfs = postings.setdefault(term, ([], []))
                rows.append(row)
                tfs.append(tf)
        self._postings = {
            t: (
                np.array(r, dtype=np.int64),
                np.array(f, dtype=np.float64),
                math.log(1 + (n - len(r) + 0.5) / (len(r) + 0.5)),
            )
            for t, (r, f) in postings.items()
        }

    def add(
        self, texts: Mapping[str, str], images: Mapping[str, str] | None = None, *, replace: bool = False
    ) -> None:
        """Add pages ``page_id -> text``; with ``replace`` pages already present are updated."""
        present = [pid for pid in texts if pid in set(self._ids)]
        if present and not replace:
            raise InvalidInputError(f"pages already in the BM25 index: {present[:5]}; pass replace=True")
        self.delete(present, reindex=False)
        for pid, text in texts.items():
            self._ids.append(pid)
            self._docs.append(Counter(tokenize(text)))
            self._images.append((images or {}).get(pid, ""))
        self._reindex()

    def delete(self, page_ids: Sequence[str], *, reindex: bool = True) -> int:
        drop = set(page_ids)
        keep = [i for i, pid in enumerate(self._ids) if pid not in drop]
        removed = len(self._ids) - len(keep)
        self._ids = [self._ids[i] for i in keep]
        self._docs = [self._docs[i] for i in keep]
        self._images = [self._images[i] for i in keep]
        if reindex:
            self._reindex()
        return removed

    @classmethod
    def build(
        cls,
        texts: Mapping[str, str],
        params: BM25Params = BM25Params(),
        images: Mapping[str, str] | None = None,
    ) -> BM25Retriever:
        """Index ``page_id -> text``; ``images`` optionally maps page ids to image paths."""
        ids = list(texts)
        return cls(
            ids, [Counter(tokenize(texts[i])) for i in ids], params, [(images or {}).get(i, "") for i in ids]
        )

    def __len__(self) -> int:
        return len(self._ids)

    def page_ids(self) -> list[str]:
        return sorted(self._ids)

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of ``query`` against every page: ``(N,)``."""
        out = np.zeros(len(self._ids), dtype=np.float64)
        k1 = self.params.k1
        for term in set(tokenize(query)):
            if term in self._postings:
                rows, tfs, idf = self._postings[term]
                out[rows] += idf * tfs * (k1 + 1) / (tfs + self._norm[rows])
        return out

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        check_k(k)
        check_texts(queries)
        excl = check_exclude(exclude, len(queries))
        out = []
        for query, skip in zip(queries, excl, strict=True):
            scores = self.scores(query)
            order = sorted(range(len(scores)), key=lambda r: (-scores[r], r))
            hits = [
                Hit(self._ids[r], float(scores[r]), self._images[r])
                for r in order
                if scores[r] > 0 and self._ids[r] not in skip
            ]
            out.append(hits[:k])
        return out

    def save(self, path: str | Path) -> Path:
        """Write ``bm25.json`` into directory ``path`` (temp file + fsync + rename)."""
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        data = {
            "k1": self.params.k1,
            "b": self.params.b,
            "ids": self._ids,
            "images": self._images,
            "docs": [dict(d) for d in self._docs],
        }
        fd, tmp = tempfile.mkstemp(dir=root, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, root / FILE_NAME)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return root / FILE_NAME

    @classmethod
    def load(cls, path: str | Path) -> BM25Retriever:
        file = Path(path) / FILE_NAME
        try:
            data = json.loads(file.read_text())
            params = BM25Params(float(data["k1"]), float(data["b"]))
            return cls(data["ids"], [Counter(d) for d in data["docs"]], params, data["images"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CorpusError(
                f"cannot read BM25 index {file}: {exc}; rebuild it with `evidra index build`"
            ) from exc
