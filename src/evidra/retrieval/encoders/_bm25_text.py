"""From text to BM25 terms: word tokens, then stop words dropped and the rest stemmed, per language.

A question is mostly words every page has ("what", "does", "the"); without stop words their
small idf still adds up, and a title page full of them outranks the one page that names the
function asked about. Without stemming "decoding" misses "decode" and "decodes". An ``Analyzer``
names a language of ``LANGUAGES`` (its stop-word list, from bm25s, and its Snowball stemmer,
from PyStemmer) and whether each step is on; the index records it (``pages.json``) so queries
are analysed as its pages were. ``none`` is plain lower-cased word tokens (what indexes written
before analyzers existed hold, and what they keep).

Stop words are on by default and stemming off: on 351 known-item questions over three real
manuals (``benchmarks/bm25_known_item.py``) dropping stop words raised MRR@10 from 0.727 to 0.765
(recall@1 0.610 to 0.632), while stemming lowered it (0.674 with both): it merges the inflected
forms that tell a technical page from its neighbours. Stemming may help where questions
paraphrase the text; it is an option of the index (``stem=True``, ``--stem``).

>>> Analyzer("en").terms("What does asn1_der_decoding do with the decoded values?")
['asn1_der_decoding', 'decoded', 'values']
>>> Analyzer("en", stem=True).terms("What does asn1_der_decoding do with the decoded values?")
['asn1_der_decod', 'decod', 'valu']
>>> Analyzer("none").terms("What does it do?")
['what', 'does', 'it', 'do']
"""

from __future__ import annotations

import functools
import re
import unicodedata
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry

_TOKEN = re.compile(r"\w+", re.UNICODE)


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
class Language:
    """A language's stop-word list (a ``bm25s.stopwords`` name) and Snowball stemmer (PyStemmer)."""

    stopwords: str  # attribute of bm25s.stopwords; "" for none
    stemmer: str  # PyStemmer algorithm; "" for none


LANGUAGES: Registry[Language] = Registry("BM25 language")
for _code, _words, _stem in (
    ("none", "", ""),
    ("en", "STOPWORDS_EN_PLUS", "english"),
    ("de", "STOPWORDS_GERMAN", "german"),
    ("fr", "STOPWORDS_FRENCH", "french"),
    ("es", "STOPWORDS_SPANISH", "spanish"),
    ("it", "STOPWORDS_ITALIAN", "italian"),
    ("pt", "STOPWORDS_PORTUGUESE", "portuguese"),
    ("nl", "STOPWORDS_DUTCH", "dutch"),
    ("da", "STOPWORDS_DANISH", "danish"),
    ("sv", "STOPWORDS_SWEDISH", "swedish"),
    ("no", "STOPWORDS_NORWEGIAN", "norwegian"),
    ("ru", "STOPWORDS_RUSSIAN", "russian"),
    ("tr", "STOPWORDS_TURKISH", "turkish"),
):
    LANGUAGES.add(_code, Language(_words, _stem))


@functools.cache
def _stopwords(name: str) -> frozenset[str]:
    """The list's words, tokenised as page text is ("don't" -> "don", "t")."""
    if not name:
        return frozenset()
    import bm25s.stopwords

    return frozenset(t for word in getattr(bm25s.stopwords, name) for t in tokenize(word))


def _stemmer(algorithm: str) -> object:
    try:
        import Stemmer
    except ImportError:
        raise InvalidInputError(
            "BM25 stemming needs PyStemmer (`pip install PyStemmer`); or build the index with "
            "--language none, or without stemming (BM25Params(stem=False))"
        ) from None
    return Stemmer.Stemmer(algorithm)


@dataclass(frozen=True)
class Analyzer:
    """How text becomes terms: ``language`` (a ``LANGUAGES`` name), with or without its stop
    words and stemmer."""

    language: str = "en"
    stopwords: bool = True
    stem: bool = False

    def __post_init__(self) -> None:
        LANGUAGES.get(self.language)  # an unknown code fails here, with the known ones

    def terms(self, text: str) -> list[str]:
        lang = LANGUAGES.get(self.language)
        tokens = tokenize(text)
        if self.stopwords and lang.stopwords:
            drop = _stopwords(lang.stopwords)
            tokens = [t for t in tokens if t not in drop]
        if self.stem and lang.stemmer and tokens:
            tokens = list(_stemmer(lang.stemmer).stemWords(tokens))  # type: ignore[attr-defined]
        return tokens
