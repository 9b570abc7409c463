"""``evidra ask --index DIR|URL``: retrieve the top k pages of a store, answer over them with citations."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest

from evidra.cli.main import main
from evidra.corpus import PageStore
from evidra.data.synth.documents import generate_documents
from evidra.retrieval.hybrid import Fusion, HybridRetriever
from evidra.retrieval.lifecycle.index_folder import open_index
from evidra.retrieval.service.server import SearchService

QUESTION = "In which year was the project founded?"


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory, tiny_dirs: dict[str, Path]) -> dict[str, Path]:
    """A store of three generated PDFs plus one page image, with a BM25 and a ColQwen2 index."""
    root = tmp_path_factory.mktemp("ask-index")
    corpus = generate_documents(root / "gen", n_docs=3, seed=5, dpi=50)
    image = sorted((root / "gen" / "renders").glob("*.png"))[0]
    (corpus.docs_dir / "scan.png").write_bytes(image.read_bytes())  # an image page beside the PDFs
    store = root / "store"
    assert main(["-q", "ingest", str(corpus.docs_dir), "--store", str(store), "--dpi", "50"]) == 0
    build = ["-q", "index", "build", "--store", str(store)]
    assert main([*build, "--out", str(root / "bm25"), "--encoder", "bm25"]) == 0
    col = ["--encoder", "colqwen2", "--model", str(tiny_dirs["colqwen2"])]
    assert main([*build, "--out", str(root / "col"), *col]) == 0
    return {"root": root, "store": store, "bm25": root / "bm25", "col": root / "col"}


def _ask(
    indexed: dict[str, Path], tiny_dirs: dict[str, Path], *extra: str, question: str = QUESTION
) -> list[str]:
    model = str(tiny_dirs["qwen2_5_vl"])
    return [
        "-q",
        "ask",
        "--store",
        str(indexed["store"]),
        "--model",
        model,
        "--max-new-tokens",
        "8",
        *extra,
        question,
    ]


def _json(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@pytest.mark.parametrize("kind", ["bm25", "col"])
def test_ask_answers_over_the_pages_the_index_returns(
    kind: str, indexed: dict[str, Path], tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    index = str(indexed[kind])
    capsys.readouterr()
    assert main(["-q", "index", "search", "--index", index, "-k", "2", "--json", QUESTION]) == 0
    expected = json.loads(capsys.readouterr().out)["hits"]
    assert main(_ask(indexed, tiny_dirs, "--index", index, "--k", "2", "--json")) == 0
    result = _json(capsys)
    assert [h["page_id"] for h in result["retrieved"]] == [h["page_id"] for h in expected]
    scores = [h["score"] for h in expected]
    assert [h["score"] for h in result["retrieved"]] == pytest.approx(scores, abs=1e-4)
    assert result["pages"] == [h["page_id"] for h in expected] and result["index"] == [index]
    assert result["finish_reason"] in {"eos", "stop", "length"} and isinstance(result["steps"], list)
    for step in result["steps"]:  # the random model's steps, if any, cite a shown page or none
        assert step["page"] in {*result["pages"], None}

    html = indexed["root"] / f"answer-{kind}.html"
    assert main(_ask(indexed, tiny_dirs, "--index", index, "--k", "2", "--html", str(html))) == 0
    out = capsys.readouterr().out.splitlines()
    cites = [p["cite"] for p in result["cited_pages"]]
    assert out[0].startswith("answer: ") and out[1] == f"pages:  {'; '.join(cites)}"
    at = out.index(f"retrieved: top 2 of {index}")
    for rank, (line, hit) in enumerate(zip(out[at + 1 : at + 3], expected, strict=True), 1):
        assert line.startswith(f"  {rank}. {cites[rank - 1]} · score ")
        assert line.endswith(f"({hit['page_id']})")
    page = html.read_text()
    assert "data:image/png;base64," in page and page.count('class="page"') == 2  # self-contained
    assert QUESTION in page and expected[0]["page_id"] in page


def _coe(text: str) -> Any:
    """A replacement for ``generate`` that writes ``text``: the tiny model's own text is noise."""
    import evidra.models.generation as generation

    def fake_generate(vlm: Any, chats: Any, params: Any) -> list[generation.Generation]:
        return [generation.Generation((), (), (), text, "eos") for _ in chats]

    return fake_generate


COE_TEXT = (
    '<think>The table lists the year. Bounding box: {"bbox_2d": [10, 20, 110, 60], "Image_index": 1} '
    'The second page has a chart. Bounding box: {"bbox_2d": [5, 5, 50, 40], "Image_index": 2}</think>\n'
    '<answer>1999\nBounding box: {"bbox_2d": [12, 22, 40, 30], "Image_index": 1}</answer>'
)


def test_ask_prints_cited_pages_and_boxes(
    indexed: dict[str, Path],
    tiny_dirs: dict[str, Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import evidra.models.generation as generation

    monkeypatch.setattr(generation, "generate", _coe(COE_TEXT))
    index = str(indexed["bm25"])
    hits = open_index(index).retriever.search([QUESTION], k=2)[0]
    first, second = hits[0].page_id, hits[1].page_id
    html = indexed["root"] / "cited.html"
    assert main(_ask(indexed, tiny_dirs, "--index", index, "--k", "2", "--html", str(html))) == 0
    out = capsys.readouterr().out.splitlines()
    with PageStore.open(indexed["store"]) as store:  # pages are cited by file and page number
        one, two = store.get(first).citation, store.get(second).citation
    assert out[:3] == ["answer: 1999", f"pages:  {one}; {two}", "cited: 2 steps"]
    assert out[3] == f"  step 1: {one}, box (10, 20, 110, 60): The table lists the year."
    assert out[4] == f"  step 2: {two}, box (5, 5, 50, 40): The second page has a chart."
    assert out[5] == f"  answer: {one}, box (12, 22, 40, 30): 1999"
    assert out[-2].startswith(f"  2. {two} · score ") and out[-2].endswith(f"({second})")
    page = html.read_text()
    assert page.count('class="box"') == 3 and "<span>answer</span>" in page
    assert main(_ask(indexed, tiny_dirs, "--index", index, "--k", "2", "--json")) == 0
    result = _json(capsys)
    assert [(s["page"], s["box"]) for s in result["steps"]] == [
        (first, [10.0, 20.0, 110.0, 60.0]),
        (second, [5.0, 5.0, 50.0, 40.0]),
    ]
    assert result["answer_box"]["page"] == first and result["answer"] == "1999"


def test_the_registered_index_and_hybrid_retrieval(
    indexed: dict[str, Path], tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    with PageStore.open(indexed["store"]) as store:  # `index build --store` registered both, newest first
        assert store.indexes() == [str(indexed["col"].resolve()), str(indexed["bm25"].resolve())]
    assert main(_ask(indexed, tiny_dirs, "--json")) == 0
    assert _json(capsys)["index"] == [str(indexed["col"].resolve())]

    both = [str(indexed["bm25"]), str(indexed["col"])]
    fused = HybridRetriever(tuple(open_index(i).retriever for i in both)).search([QUESTION], k=3)[0]
    assert main(_ask(indexed, tiny_dirs, "--index", both[0], "--index", both[1], "--json")) == 0
    result = _json(capsys)
    assert [h["page_id"] for h in result["retrieved"]] == [h.page_id for h in fused]
    assert result["index"] == both and len(result["pages"]) == 3  # --k defaults to 3

    rrf = Fusion("rrf", rrf_k=1, weights=(1.0, 0.5))
    fused = HybridRetriever(tuple(open_index(i).retriever for i in both), rrf).search([QUESTION], k=3)[0]
    options = ["--fusion", "rrf", "--rrf-k", "1", "--fusion-weight", "1", "--fusion-weight", "0.5"]
    assert main(_ask(indexed, tiny_dirs, "--index", both[0], "--index", both[1], *options, "--json")) == 0
    retrieved = _json(capsys)["retrieved"]
    assert [(h["page_id"], h["score"]) for h in retrieved] == [
        (h.page_id, pytest.approx(h.score)) for h in fused
    ]
    assert retrieved[0]["score"] <= 1 / 2 + 0.5 / 2  # RRF with k 1: at most w / (1 + 1) per index


def test_ask_through_a_running_serve_index(
    indexed: dict[str, Path], tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    engine = open_index(indexed["bm25"])
    expected = engine.retriever.search([QUESTION], k=2)[0]
    with SearchService(engine.retriever, n_pages=len(engine.index)).running() as url:
        assert main(_ask(indexed, tiny_dirs, "--index", url, "--k", "2", "--json")) == 0
    result = _json(capsys)
    assert [h["page_id"] for h in result["retrieved"]] == [h.page_id for h in expected]
    assert result["index"] == [url]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    capsys.readouterr()  # what earlier commands printed (progress bars) is not this one's error
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()[-1]  # after any weight-loading progress bar
    assert err.startswith("evidra ask: error: ")
    return err


def test_bad_indexes_get_one_line_naming_the_input_and_the_fix(
    indexed: dict[str, Path], tiny_dirs: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    root = indexed["root"]
    missing = str(root / "no-index")
    err = _error(_ask(indexed, tiny_dirs, "--index", missing), capsys)
    assert missing in err and "does not exist" in err and "evidra index build --store" in err
    err = _error(_ask(indexed, tiny_dirs, "--index", str(root / "gen")), capsys)
    assert str(root / "gen") in err and "holds no index" in err and "evidra index build" in err
    url = f"http://127.0.0.1:{_free_port()}"
    err = _error(_ask(indexed, tiny_dirs, "--index", url), capsys)
    assert url in err and "unreachable" in err and "evidra serve-index" in err

    other = generate_documents(root / "other", n_docs=1, seed=11, dpi=50)
    assert main(["-q", "ingest", str(other.docs_dir), "--store", str(root / "other-store")]) == 0
    foreign = str(root / "other-bm25")
    build = ["-q", "index", "build", "--store", str(root / "other-store"), "--out", foreign]
    assert main([*build, "--encoder", "bm25"]) == 0
    err = _error(_ask(indexed, tiny_dirs, "--index", foreign), capsys)
    assert foreign in err and "built over another store" in err and str(indexed["store"]) in err
    served = open_index(foreign)
    with SearchService(served.retriever).running() as url:
        err = _error(_ask(indexed, tiny_dirs, "--index", url), capsys)
    assert url in err and "another store" in err

    nothing = "Zyzzogeton quux?"  # no word of it is in the documents: BM25 finds no page
    capsys.readouterr()
    assert main(_ask(indexed, tiny_dirs, "--index", str(indexed["bm25"]), question=nothing)) == 0
    assert capsys.readouterr().out.startswith("answer: (no relevant page: nothing in the index matches")
    err = _error(_ask(indexed, tiny_dirs, "--index", foreign, "--page", "x"), capsys)
    assert "--page" in err and "--index" in err
    err = _error(_ask(indexed, tiny_dirs, "--index", str(indexed["bm25"]), "--k", "0"), capsys)
    assert "k must be" in err
