"""``evidra ask --paradigm coe --verify``: LAT's attribution check of every evidence step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.core.types import Box, Page, Sample
from evidra.corpus import PageStore
from evidra.data.synth.documents import SynthCorpus, generate_documents
from evidra.methods.lat.paradigm import format_box, parse_coe
from evidra.methods.lat.similarity import TEXT_OVERLAP_TAU, TextOverlapSimilarity, verify_steps
from evidra.rag import verdict_citation
from evidra.rag_view import citation_record, format_verdict


@pytest.fixture(scope="module")
def synth(tmp_path_factory: pytest.TempPathFactory) -> tuple[SynthCorpus, Path]:
    root = tmp_path_factory.mktemp("verify")
    corpus = generate_documents(root / "docs", n_docs=1, seed=3, dpi=72)
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(root / "store"), "--dpi", "72"]) == 0
    return corpus, root / "store"


def answerable(corpus: SynthCorpus, store: Path) -> tuple[Sample, Page]:
    with PageStore.open(store) as s:
        pages = {p.id: p for p in s.pages()}
    sample = next(x for x in corpus.samples(pages) if x.answerable and x.extras.get("kind") == "text")
    gold = sample.gold_boxes[0]
    return sample, pages[gold.page_id]


def coe_answer(sample: Sample, page: Page) -> str:
    gold = sample.gold_boxes[0].box
    k = sample.page_index(page.id)
    corner = Box(0, 0, 10, 10)  # blank margin: no words there
    return (
        f"<think>{sample.gold_evidence[page.id]} {format_box(sample.evidence_box.box, k)} "
        f"The page also shows the budget. {format_box(corner, k)}</think>\n"
        f"<answer>{sample.answers[0]}\n{format_box(gold, k)}</answer>"
    )


def test_verify_supports_the_evidence_step_and_rejects_the_blank_one(synth: tuple[SynthCorpus, Path]) -> None:
    sample, page = answerable(*synth)
    parsed = parse_coe(coe_answer(sample, page))
    first, second = verify_steps(parsed, sample.pages, TextOverlapSimilarity())
    # step 1 quotes exactly the words inside its evidence box: token F1 1.0
    assert first.supported and first.score == pytest.approx(1.0) and first.page_id == page.id
    assert not second.supported and second.score == 0.0
    records = [citation_record(verdict_citation(v, sample.pages)) for v in (first, second)]
    assert (
        records[1]["box"] == [0.0, 0.0, 10.0, 10.0]
        and records[1]["page_index"] == sample.page_index(page.id) + 1
    )
    line = format_verdict(records[1])
    cite = f"{page.file_name} p. {page.page_number}"  # the file and page a person looks up
    assert line == (
        f"step 2: unsupported [similarity 0.000 < tau 0.3] {cite}, box (0, 0, 10, 10): "
        "The page also shows the budget."
    )


def test_verify_rejects_a_step_without_its_page(synth: tuple[SynthCorpus, Path]) -> None:
    sample, _page = answerable(*synth)
    text = (
        '<think>A fact. Bounding box: {"bbox_2d": [1, 1, 5, 5], "Image_index": 9}</think><answer>x</answer>'
    )
    (only,) = verify_steps(parse_coe(text), sample.pages, TextOverlapSimilarity())
    assert (only.supported, only.reason, only.score) == (False, "cited page does not exist", None)


def test_cli_prints_each_step(
    synth: tuple[SynthCorpus, Path],
    tiny_dirs: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tiny model writes noise, so its generation is replaced by a known CoE answer; the
    model still loads and the paradigm's prompt is built."""
    import evidra.models.generation as generation

    corpus, store = synth
    sample, page = answerable(corpus, store)
    text = coe_answer(sample, page)
    seen: list[Any] = []

    def fake_generate(vlm: Any, chats: Any, params: Any) -> list[generation.Generation]:
        seen.append(chats)
        return [generation.Generation((), (), (), text, "eos")]

    monkeypatch.setattr(generation, "generate", fake_generate)
    args = [
        "ask",
        "--store",
        str(store),
        "--model",
        str(tiny_dirs["qwen2_5_vl"]),
        "--paradigm",
        "coe",
        "--verify",
    ]
    args += [a for p in sample.pages for a in ("--page", p.id)]
    assert main(["-q", *args, sample.question]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"answer: {sample.answers[0]}"
    # no --retriever: the text layer's word overlap, with the tau calibrated for it
    assert out[2] == f"evidence: 1/2 steps supported (tau {TEXT_OVERLAP_TAU})"
    assert out[3].startswith(f"  step 1: supported [similarity 1.000 >= tau {TEXT_OVERLAP_TAU}]")
    assert out[4].startswith("  step 2: unsupported")
    assert "ImageSize" in "".join(getattr(p, "text", "") for p in seen[0][0][0].content)
    assert main(["-q", *args, "--json", sample.question]) == 0
    steps = json.loads(capsys.readouterr().out)["steps"]
    assert [s["supported"] for s in steps] == [True, False]


@pytest.mark.slow
def test_cli_verify_runs_on_the_tiny_model(
    synth: tuple[SynthCorpus, Path], tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    _, store = synth
    with PageStore.open(store) as s:
        pid = s.pages(with_words=False)[0].id
    model = str(tiny_dirs["qwen2_5_vl"])
    args = ["-q", "ask", "--store", str(store), "--model", model, "--page", pid, "--paradigm", "coe"]
    assert main([*args, "--verify", "--json", "--max-new-tokens", "8", "Who leads it?"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert isinstance(result["steps"], list) and result["pages"] == [pid]
    assert main([*args[:-2], "--paradigm", "direct", "--verify", "Q?"]) == 2
    assert "--paradigm coe" in capsys.readouterr().err
