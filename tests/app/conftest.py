"""Fixtures of the app tests: generated documents, a running ``evidra serve``, an oracle model."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evidra.app.http import ServeOptions
from evidra.app.server import running
from evidra.app.workspace import ModelSpec, Workspace
from evidra.core.types import ImagePart
from evidra.data.synth.documents import SynthCorpus, SynthQuestion, generate_documents

DPI = 150.0  # the app ingests uploads at 150 dpi, so the questions' boxes are in its page pixels


@pytest.fixture(scope="session")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> SynthCorpus:
    return generate_documents(
        tmp_path_factory.mktemp("corpus"), n_docs=2, seed=6, dpi=DPI
    )  # doc_000.pdf: text, table and chart pages


def answerable(corpus: SynthCorpus) -> SynthQuestion:
    """A text question on a page of a document of two pages or more."""
    pages = {d.source: len(d.page_ids) for d in corpus.documents}
    return next(
        q for q in corpus.questions if q.gold_box is not None and q.kind == "text" and pages[q.source] > 1
    )


def oracle_text(corpus: SynthCorpus, question: SynthQuestion, shown: list[tuple[str, int] | None]) -> str:
    """Chain-of-evidence text citing the question's evidence and answer boxes on the image that
    shows its page, and another question's evidence on another shown page (if there is one)."""
    assert question.evidence_box is not None and question.gold_box is not None

    def box(b: tuple[float, ...], i: int) -> str:
        return f'Bounding box: {{"bbox_2d": [{", ".join(str(round(c)) for c in b)}], "Image_index": {i}}}'

    where = next((i for i, s in enumerate(shown, 1) if s == (question.source, question.page_number)), 1)
    steps = [f"The passage states it. {box(question.evidence_box.as_tuple(), where)}"]
    other = next(
        (
            (i, q)
            for q in corpus.questions
            for i, s in enumerate(shown, 1)
            if q.evidence_box is not None and i != where and s == (q.source, q.page_number)
        ),
        None,
    )
    if other is not None:
        assert other[1].evidence_box is not None
        steps.append(f"Another page says more. {box(other[1].evidence_box.as_tuple(), other[0])}")
    return (
        f"<think>{' '.join(steps)}</think>\n<answer>{question.answers[0]}\n"
        f"{box(question.gold_box.as_tuple(), where)}</answer>"
    )


@pytest.fixture
def oracle(monkeypatch: pytest.MonkeyPatch, corpus: SynthCorpus) -> dict[str, Any]:
    """``generate`` replaced by an oracle that streams its chain of evidence in small pieces (the
    tiny model's own text is noise, with no box to draw); everything around it is real."""
    import evidra.models.generation as generation

    state: dict[str, Any] = {"question": answerable(corpus), "sources": {}, "texts": [], "chats": []}

    def fake_generate(vlm: Any, chats: Any, params: Any, on_text: Any = None) -> list[generation.Generation]:
        images = [p for m in chats[0] for p in m.content if isinstance(p, ImagePart)]
        shown = [state["sources"].get(str(p.page_id)) for p in images]
        text = oracle_text(corpus, state["question"], shown)
        state["texts"].append(text)
        state["chats"].append(list(chats[0]))
        for start in range(0, len(text), 12):
            if on_text is not None:
                on_text(text[start : start + 12])
                time.sleep(0.01)
        return [generation.Generation((), (), (), text, "eos")]

    monkeypatch.setattr(generation, "generate", fake_generate)
    return state


@pytest.fixture
def serve(tmp_path: Path, tiny_dirs: dict[str, Path]) -> Iterator[tuple[str, Workspace]]:
    """``evidra serve`` over a new store with the tiny model, on a free loopback port."""
    workspace = Workspace(
        tmp_path / "store", None, ModelSpec(str(tiny_dirs["qwen2_5_vl"]), max_new_tokens=24)
    )
    workspace.start_sync()
    try:
        with running(workspace, ServeOptions(access_log=False)) as url:
            yield url, workspace
    finally:
        workspace.close()
