"""The parameters of a BM25 index: the scoring constants and how text becomes terms.

``k1`` and ``b`` are Okapi BM25's (``bm25`` writes the formula); ``language``, ``stopwords`` and
``stem`` make the ``Analyzer`` of ``_bm25_text``. The retriever (``bm25``) scores with them and
the index folder (``_bm25_files``) records them, so a loaded index analyses queries as its pages
were analysed.
"""

from __future__ import annotations

from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.retrieval.encoders._bm25_text import LANGUAGES, Analyzer


@dataclass(frozen=True)
class BM25Params:
    k1: float = 1.5
    b: float = 0.75
    language: str = "en"  # a name in LANGUAGES: its stop words and stemmer; "none": plain tokens
    stopwords: bool = True
    stem: bool = False  # Snowball stemming: off by default (see _bm25_text: it lowered known-item MRR)

    def __post_init__(self) -> None:
        if self.k1 < 0 or not 0.0 <= self.b <= 1.0:
            raise InvalidInputError(f"BM25 needs k1 >= 0 and 0 <= b <= 1, got k1={self.k1}, b={self.b}")
        LANGUAGES.get(self.language)

    @property
    def analyzer(self) -> Analyzer:
        return Analyzer(self.language, self.stopwords, self.stem)
