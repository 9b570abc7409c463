"""Synthetic documents: determinism, and gold boxes verified against the real text layer / ink."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import iou
from evidra.core.types import Box, Page, Word, content_hash, make_page_id
from evidra.corpus import PageStore, ingest
from evidra.data.synth import NO_ANSWER, SynthCorpus, generate_documents, generate_image_documents
from evidra.data.synth._documents_layout import PROJECTS, _Pool
from evidra.data.synth.corpus_json import corpus_from_json, corpus_to_json

TOL = 1.5  # pixels: rounding of the rendered bitmap size (PDFium rounds 1650.0 up to 1651)


@pytest.fixture(scope="module")
def pdf_corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[SynthCorpus, dict[str, Page]]:
    root = tmp_path_factory.mktemp("synth")
    corpus = generate_documents(root / "docs", n_docs=4, seed=7, dpi=100)
    report = ingest(corpus.docs_dir, root / "store", dpi=100)
    assert report.failed == ()
    with PageStore.open(root / "store") as store:
        pages = {p.id: p for p in store.pages()}
    return corpus, pages


def _union(boxes: list[Box]) -> Box:
    return Box(
        min(b.x1 for b in boxes), min(b.y1 for b in boxes), max(b.x2 for b in boxes), max(b.y2 for b in boxes)
    )


def _answer_words(page: Page, answer: str, gold: Box) -> list[Word]:
    """Text-layer words spelling ``answer`` whose centre lies in the gold box."""
    tokens = answer.split()
    hits = []
    for word in page.words:
        cx, cy = (word.box.x1 + word.box.x2) / 2, (word.box.y1 + word.box.y2) / 2
        if word.text.rstrip(".,;:") in tokens and gold.x1 <= cx <= gold.x2 and gold.y1 <= cy <= gold.y2:
            hits.append(word)
    return hits


def test_pdf_gold_boxes_match_the_ingested_text_layer(
    pdf_corpus: tuple[SynthCorpus, dict[str, Page]],
) -> None:
    corpus, pages = pdf_corpus
    answerable = [q for q in corpus.questions if q.answerable]
    assert {q.kind for q in answerable} == {"text", "table", "chart"}
    for q in answerable:
        assert q.page_id is not None and q.gold_box is not None and q.evidence_box is not None
        page = pages[q.page_id]
        assert (page.source, page.page_number) == (q.source, q.page_number)
        words = _answer_words(page, q.answers[0], q.gold_box)
        assert " ".join(w.text.rstrip(".,;:") for w in words) == q.answers[0], q
        for w in words:  # inside the gold box; a trailing full stop may stick out to the right
            assert w.box.x1 >= q.gold_box.x1 - TOL and w.box.y1 >= q.gold_box.y1 - TOL, q
            assert w.box.y2 <= q.gold_box.y2 + TOL, q
            if not w.text.endswith((".", ",")):
                assert w.box.x2 <= q.gold_box.x2 + TOL, q
        assert iou(_union([w.box for w in words]), q.gold_box) >= 0.5, q
        g, e = q.gold_box, q.evidence_box
        assert e.x1 <= g.x1 and e.y1 <= g.y1 and e.x2 >= g.x2 and e.y2 >= g.y2  # evidence holds answer
        assert q.answers[0] in q.evidence_text


def test_text_evidence_is_the_sentence_on_the_page(pdf_corpus: tuple[SynthCorpus, dict[str, Page]]) -> None:
    corpus, pages = pdf_corpus
    texts = [q for q in corpus.questions if q.kind == "text"]
    assert texts
    for q in texts:
        assert q.page_id is not None
        assert q.evidence_text in pages[q.page_id].text  # words joined by single spaces
        assert re.fullmatch(r"[A-Z].*\.", q.evidence_text)


def test_unanswerable_questions_name_nothing_in_the_corpus(
    pdf_corpus: tuple[SynthCorpus, dict[str, Page]],
) -> None:
    corpus, pages = pdf_corpus
    absent = [q for q in corpus.questions if not q.answerable]
    assert len(absent) == 4  # one per document
    everything = " ".join(p.text for p in pages.values())
    for q in absent:
        assert q.answers == (NO_ANSWER,) and q.page_id is None and q.gold_box is None and q.kind == "none"
        name = re.search(r"(?:the|of) ([A-Z][a-z]+(?: \d+)?) (?:project|in)", q.question)
        assert name is not None and name.group(1) not in everything


def test_questions_are_unique_and_page_ids_match_ingest(
    pdf_corpus: tuple[SynthCorpus, dict[str, Page]],
) -> None:
    corpus, pages = pdf_corpus
    assert len({q.question for q in corpus.questions}) == len(corpus.questions)
    assert {pid for d in corpus.documents for pid in d.page_ids} == set(pages)
    for doc in corpus.documents:
        data = (corpus.docs_dir / doc.source).read_bytes()
        assert doc.page_ids[0] == make_page_id(content_hash(data), 1)
        assert 1 <= len(doc.page_ids) <= 3 and all(Path(p).is_file() for p in doc.image_paths)


def test_samples_from_renders_and_from_a_store(pdf_corpus: tuple[SynthCorpus, dict[str, Page]]) -> None:
    corpus, pages = pdf_corpus
    samples = corpus.samples()
    assert len(samples) == len(corpus.questions)
    for sample, q in zip(samples, corpus.questions, strict=True):
        assert sample.question == q.question and sample.answerable == q.answerable
        assert sample.gold_pages == ((q.page_id,) if q.page_id else ())
        if q.answerable:
            assert sample.gold_boxes[0].box == q.gold_box
            assert sample.gold_evidence[q.page_id] == q.evidence_text
    with_words = corpus.samples(pages)
    assert all(p.words for s in with_words for p in s.pages if s.gold_pages and p.id == s.gold_pages[0])
    with pytest.raises(InvalidInputError, match="ingest"):
        corpus.samples({})


def test_rendered_pages_carry_the_text_layer_an_ingest_gives(
    pdf_corpus: tuple[SynthCorpus, dict[str, Page]],
) -> None:
    corpus, ingested = pdf_corpus
    rendered = corpus.pages()
    assert rendered.keys() == ingested.keys()
    for pid, page in rendered.items():
        assert page.words and [w.text for w in page.words] == [w.text for w in ingested[pid].words]
        for mine, theirs in zip(page.words, ingested[pid].words, strict=True):
            assert abs(mine.box.x1 - theirs.box.x1) <= TOL and abs(mine.box.y2 - theirs.box.y2) <= TOL
    # a question's answer is in the text layer of its gold page, without any ingest
    for sample, q in zip(corpus.samples(), corpus.questions, strict=True):
        if q.answerable and q.page_id is not None and q.gold_box is not None:
            page = next(p for p in sample.pages if p.id == q.page_id)
            words = _answer_words(page, q.answers[0], q.gold_box)
            assert " ".join(w.text.rstrip(".,;:") for w in words) == q.answers[0], q


def test_the_corpus_cache_keeps_the_words(pdf_corpus: tuple[SynthCorpus, dict[str, Page]]) -> None:
    corpus, _ = pdf_corpus
    back = corpus_from_json(corpus_to_json(corpus))
    assert back == corpus and back.pages() == corpus.pages()
    old = json.loads(corpus_to_json(corpus))  # a cache written before the words were kept
    for doc in old["documents"]:
        del doc["page_words"]
    assert not any(p.words for p in corpus_from_json(json.dumps(old)).pages().values())
    old["documents"][0]["page_words"] = [[["word", 5.0, 1.0, 2.0, 3.0]]]  # x2 < x1: not a box
    with pytest.raises(InvalidInputError, match="not a synthetic corpus cache"):
        corpus_from_json(json.dumps(old))
    # questions whose fields are of another kind (once kept as they were) are refused alike
    for field, value in (("kind", "poem"), ("answers", "42"), ("page_number", "1"), ("answerable", 1)):
        damaged = json.loads(corpus_to_json(corpus))
        damaged["questions"][0][field] = value
        with pytest.raises(InvalidInputError, match="not a synthetic corpus cache"):
            corpus_from_json(json.dumps(damaged))


def test_generation_is_deterministic_per_seed_and_fast(tmp_path: Path) -> None:
    start = time.perf_counter()
    a = generate_documents(tmp_path / "a", n_docs=3, seed=3)
    elapsed = time.perf_counter() - start
    b = generate_documents(tmp_path / "b", n_docs=3, seed=3)
    c = generate_documents(tmp_path / "c", n_docs=3, seed=4)
    assert [(q.question, q.answers, q.gold_box) for q in a.questions] == [
        (q.question, q.answers, q.gold_box) for q in b.questions
    ]
    assert [d.page_ids for d in a.documents] == [d.page_ids for d in b.documents]
    assert [d.page_ids for d in a.documents] != [d.page_ids for d in c.documents]
    assert (a.docs_dir / "doc_000.pdf").read_bytes() == (b.docs_dir / "doc_000.pdf").read_bytes()
    assert elapsed < 2.0  # measured ~0.2 s on the 2-core dev machine


def test_image_documents_boxes_cover_the_drawn_ink(tmp_path: Path) -> None:
    corpus = generate_image_documents(tmp_path / "img", n_docs=3, seed=1, dpi=100)
    assert {q.kind for q in corpus.questions if q.answerable} == {"text", "table", "chart"}
    docs = {d.id: d for d in corpus.documents}
    for q in corpus.questions:
        if not q.answerable:
            continue
        assert q.gold_box is not None and q.page_id == docs[q.doc_id].page_ids[0]
        ink = np.asarray(Image.open(docs[q.doc_id].image_paths[0]).convert("L")) < 128
        g = q.gold_box
        inside = ink[int(g.y1) : int(np.ceil(g.y2)), int(g.x1) : int(np.ceil(g.x2))]
        ys, xs = np.nonzero(inside)
        ink_box = Box(g.x1 + xs.min(), g.y1 + ys.min(), g.x1 + xs.max() + 1, g.y1 + ys.max() + 1)
        assert iou(ink_box, g) >= 0.7, q  # textbbox is tight around the drawn glyphs
    report = ingest(corpus.docs_dir, tmp_path / "store")
    assert sorted(report.added) == sorted(d.page_ids[0] for d in corpus.documents)


def test_invalid_arguments_are_rejected(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="n_docs"):
        generate_documents(tmp_path, n_docs=0)
    with pytest.raises(InvalidInputError, match="max_pages"):
        generate_documents(tmp_path, max_pages=4)
    with pytest.raises(InvalidInputError, match="dpi"):
        generate_image_documents(tmp_path, dpi=-1)


def test_name_pool_never_repeats_a_name() -> None:
    pool = _Pool(random.Random(0), PROJECTS)
    names = [pool.draw() for _ in range(2 * len(PROJECTS) + 3)]
    assert len(set(names)) == len(names)
    assert sum(n.endswith(" 2") for n in names) == len(PROJECTS)  # second round is numbered
