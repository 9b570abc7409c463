"""``evidra.RAG``: documents -> store -> index -> retrieved pages -> an answer with cited boxes."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

import evidra
from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, CoordSpace
from evidra.corpus import PageStore
from evidra.data.synth.documents import generate_documents
from evidra.models.generation import SamplingParams
from evidra.rag import RAG, Answer
from evidra.rag_view import viewer_record
from evidra.retrieval.lifecycle.index_folder import open_index
from float_hits import assert_hits_close

QUESTION = "In which city was the project founded?"
SHORT = SamplingParams(max_new_tokens=8, temperature=0.0)


@pytest.fixture(scope="module")
def docs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two generated PDFs and one page image."""
    root = tmp_path_factory.mktemp("rag")
    corpus = generate_documents(root / "gen", n_docs=2, seed=7, dpi=50)
    image = sorted((root / "gen" / "renders").glob("*.png"))[-1]
    (corpus.docs_dir / "scan.png").write_bytes(image.read_bytes())
    return corpus.docs_dir


def test_from_documents_then_ask_returns_the_index_pages(
    docs: Path, tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    model = tiny_dirs["qwen2_5_vl"]
    rag = evidra.RAG.from_documents(docs, model=model, store=tmp_path / "store", params=SHORT, dpi=50)
    with rag:
        answer = rag.ask(QUESTION, k=2)
    index = (tmp_path / "store" / "index-bm25").resolve()
    expected = open_index(index).retriever.search([QUESTION], k=2)[0]
    assert isinstance(answer, Answer)
    assert_hits_close([answer.retrieved], [expected])
    assert [p.id for p in answer.pages] == [h.page_id for h in expected] and answer.index == (str(index),)
    assert answer.text is None or isinstance(answer.text, str)
    assert all(s.page_id in {*(p.id for p in answer.pages), None} for s in answer.steps)
    with pytest.raises(dataclasses.FrozenInstanceError):
        answer.text = "changed"  # type: ignore[misc]
    with PageStore.open(tmp_path / "store") as store:
        n_pages = len(store)
        assert store.indexes() == [str(index)]
    # the store and index are reused: only new pages would be added
    again = RAG.from_documents(docs, model=model, store=tmp_path / "store", params=SHORT, dpi=50)
    with again:
        assert len(again.store) == n_pages and again.retrieve(QUESTION, k=2) == expected


def test_load_uses_the_registered_index_and_pages_by_hand(
    docs: Path, tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    from evidra.cli.main import main

    store = tmp_path / "store"
    assert main(["-q", "ingest", str(docs), "--store", str(store), "--dpi", "50"]) == 0
    bare = RAG.load(store, model=tiny_dirs["qwen2_5_vl"], max_pages=2, params=SHORT)
    with bare, pytest.raises(InvalidInputError, match="no index"):  # more pages than max_pages, no index
        bare.ask(QUESTION)
    out = tmp_path / "visual"
    col = ["--encoder", "colqwen2", "--model", str(tiny_dirs["colqwen2"])]
    assert main(["-q", "index", "build", "--store", str(store), "--out", str(out), *col]) == 0
    with RAG.load(store, model=tiny_dirs["qwen2_5_vl"], k=2, params=SHORT) as rag:
        answer = rag.ask(QUESTION)
        assert answer.index == (str(out.resolve()),)
        assert_hits_close([answer.retrieved], open_index(out).retriever.search([QUESTION], k=2))
        chosen = rag.store.page_ids()[-1]
        by_hand = rag.ask(QUESTION, pages=[chosen])
        assert [p.id for p in by_hand.pages] == [chosen] and by_hand.retrieved == () and by_hand.index == ()
    direct = RAG.load(store, out, model=tiny_dirs["qwen2_5_vl"], paradigm="direct", params=SHORT)
    with direct, pytest.raises(InvalidInputError, match="paradigm 'coe'"):
        direct.ask(QUESTION, verify=True)
    with pytest.raises(InvalidInputError, match="k must be"):
        RAG.load(store, out, model=tiny_dirs["qwen2_5_vl"], k=0)


def test_citations_are_pages_and_page_pixel_boxes(
    docs: Path, tiny_dirs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import evidra.models.generation as generation

    text = (
        '<think>The city is named. Bounding box: {"bbox_2d": [4, 6, 40, 20], "Image_index": 2} '
        'A page that was not shown. Bounding box: {"bbox_2d": [1, 1, 9, 9], "Image_index": 7}</think>'
        '<answer>Oslo\nBounding box: {"bbox_2d": [5, 7, 30, 18], "Image_index": 2}</answer>'
    )

    def fake_generate(vlm: Any, chats: Any, params: Any) -> list[generation.Generation]:
        return [generation.Generation((), (), (), text, "eos") for _ in chats]

    monkeypatch.setattr(generation, "generate", fake_generate)
    with RAG.from_documents(docs, model=tiny_dirs["qwen2_5_vl"], params=SHORT, dpi=50) as rag:
        kept = rag.store.root
        answer = rag.ask(QUESTION, k=2, verify=True)
        second = answer.pages[1].id
        first, unshown = answer.steps
        assert (first.step, first.page_id, first.page_index) == (1, second, 1)
        assert first.box == Box(4, 6, 40, 20, CoordSpace.PAGE) and first.supported is not None
        assert (unshown.page_id, unshown.supported) == (None, False)
        assert unshown.reason == "cited page does not exist"
        assert answer.answer_box is not None and answer.answer_box.page_id == second
        assert answer.text == "Oslo" and answer.verified
        record = viewer_record(answer)
        assert [len(p.boxes) for p in record.pages] == [0, 2]  # step 1 and the answer, on image 2
        assert [s.label for s in record.steps] == ["1", "2", "answer"]
    assert not kept.exists()  # from_documents without a store: a temporary folder, removed on close


def test_where_filters_pages_and_nothing_found_is_an_answer(
    docs: Path, tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    from evidra.rag_view import NO_HITS, answer_record, write_html

    rag = RAG.from_documents(
        docs, model=tiny_dirs["qwen2_5_vl"], store=tmp_path / "store", params=SHORT, dpi=50
    )
    with rag:
        everywhere = {rag.store.get(h.page_id).file_name for h in rag.retrieve(QUESTION, k=20)}
        chosen = sorted(everywhere)[-1]
        hits = rag.retrieve(QUESTION, k=20, where=[f"file={chosen}"])
        assert hits and {rag.store.get(h.page_id).file_name for h in hits} == {chosen}
        answer = rag.ask(QUESTION, k=1, where=[f"file={chosen}"])
        assert [s.file for s in answer.sources] == [chosen] and answer.sources[0].title
        record = answer_record(answer)["cited_pages"][0]
        assert record["file"] == chosen and record["cite"] == f"{chosen} p. {record['page_number']}"
        with pytest.raises(InvalidInputError, match=r"no page of store .* matches file=none\.pdf"):
            rag.retrieve(QUESTION, where=["file=none.pdf"])
        nothing = rag.ask("What is the capital of Mongolia?")
    assert nothing.no_hits and nothing.text is None and nothing.pages == () and nothing.output == ""
    assert answer_record(nothing)["no_hits"] is True
    assert NO_HITS in write_html(nothing, tmp_path / "none.html").read_text()
