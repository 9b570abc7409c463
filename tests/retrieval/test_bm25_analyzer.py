"""BM25 terms: stop words and stemming per language, recorded by the index and kept by old ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.core.errors import EvidraError
from evidra.retrieval.encoders._bm25_files import MANIFEST
from evidra.retrieval.encoders._bm25_text import Analyzer
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever

# a title page full of question words, and the one page about the function asked after
PAGES = {
    "title": "What is it? What does it do, and how does it do what it does? A guide to what you do.",
    "decoding": "The function asn1_der_decoding decodes DER data into the structure given.",
    "encoding": "The function asn1_der_coding encodes a structure as DER data.",
}


def test_english_drops_question_words_and_stems() -> None:
    assert Analyzer("en", stem=True).terms("What does it decode? Decoding decoded data") == [
        "decod",
        "decod",
        "decod",
        "data",
    ]
    assert Analyzer("en").terms("What does it decode?") == ["decode"]  # stemming is off by default
    assert Analyzer("en", stopwords=False, stem=True).terms("does decoding") == ["doe", "decod"]
    assert Analyzer("fr", stem=True).terms("Les décodages du fichier") == ["décodag", "fichi"]
    with pytest.raises(EvidraError, match=r"Known: .*en"):
        Analyzer("english")


def test_a_question_finds_its_page_not_the_title_page() -> None:
    question = "What does asn1_der_decoding do?"
    plain = BM25Retriever.build(PAGES, BM25Params(language="none"))
    assert plain.search([question], k=1)[0][0].page_id == "title"  # question words outweigh the name
    english = BM25Retriever.build(PAGES)  # the default: English stop words
    assert [h.page_id for h in english.search([question], k=3)[0]] == ["decoding"]
    # stemming: "decode" meets "decodes" and "decoding"
    stemmed = BM25Retriever.build(PAGES, BM25Params(stem=True))
    assert stemmed.search(["how to decode"], k=1)[0][0].page_id == "decoding"
    assert english.search(["decode"], k=1) == [[]]


def test_nothing_in_the_pages_means_no_hits() -> None:
    english = BM25Retriever.build(PAGES)
    assert english.search(["What is the capital of Mongolia?"], k=3) == [[]]
    assert english.search(["what does it do?"], k=3) == [[]]  # only stop words: nothing to match


def test_the_index_records_its_language_and_old_indexes_keep_plain_tokens(tmp_path: Path) -> None:
    BM25Retriever.build(PAGES, BM25Params(language="de", stem=True)).save(tmp_path / "de")
    loaded = BM25Retriever.load(tmp_path / "de")
    assert (loaded.params.language, loaded.params.stopwords, loaded.params.stem) == ("de", True, True)
    # an index written before analyzers existed has no language in pages.json: plain tokens, as built
    BM25Retriever.build(PAGES, BM25Params(language="none")).save(tmp_path / "old")
    folder = tmp_path / "old" / json.loads((tmp_path / "old" / MANIFEST).read_text())["folder"]
    pages = json.loads((folder / "pages.json").read_text())
    for key in ("language", "stopwords", "stem"):
        del pages[key]
    (folder / "pages.json").write_text(json.dumps(pages))
    old = BM25Retriever.load(tmp_path / "old")
    assert old.params.language == "none"
    assert old.search(["What does asn1_der_decoding do?"], k=1)[0][0].page_id == "title"
