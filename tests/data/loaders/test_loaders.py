"""Each loader on fixture files written in its benchmark's published format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.core.types import Box
from evidra.data.loaders import LOADERS, load

FIX = Path(__file__).parents[2] / "fixtures" / "benchmarks"


def test_every_benchmark_is_registered() -> None:
    expected = {
        "visa_wiki",
        "visa_paper",
        "visa_fineweb",
        "chartqa",
        "docvqa",
        "infovqa",
        "mpdocvqa",
        "slidevqa",
        "vidoseek",
        "mmlongbench",
        "vidore",
        "visrag",
        "beir",
        "evisrag_top3",
    }
    assert expected <= set(LOADERS.names())


def test_visa_candidates_no_answer_and_strata(tmp_path: Path) -> None:
    samples = load(
        "visa_wiki", FIX / "visa" / "test.jsonl", pool=[FIX / "visa" / "train.jsonl"], image_dir=tmp_path
    )
    first, second = samples
    assert [p.id for p in first.pages] == ["nq-7", "nq-1", "nq-9"]
    assert first.gold_pages == ("nq-1",) and first.answers == ("Jane Doe",) and first.answerable
    assert first.gold_boxes[0].box == Box(4, 120, 53, 140)
    assert (first.pages[1].width, first.pages[1].height) == (98, 392)
    assert first.extras["stratum"] == "first_page_passage"  # "p" and y1 = 120 < 980
    assert not second.answerable and second.gold_pages == () and second.answers == ("No Answer",)
    assert second.extras["stratum"] == "non_passage" and second.extras["pos_idx"] == -1
    # nq-2 is not among its own candidates (pos_idx -1): 3 distinct images are written, once each
    assert len(list(tmp_path.glob("*.png"))) == 3


def test_visa_oracle_and_missing_candidate(tmp_path: Path) -> None:
    (oracle,) = load("visa_wiki", FIX / "visa" / "test.jsonl", oracle=True, image_dir=tmp_path, limit=1)
    assert [p.id for p in oracle.pages] == ["nq-1"] and oracle.gold_pages == ("nq-1",)
    with pytest.raises(InvalidInputError, match=r"test.jsonl, record 0.*'nq-7'.*pool="):
        load("visa_wiki", FIX / "visa" / "test.jsonl", image_dir=tmp_path)


def test_missing_field_names_file_and_record(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "x", "question": "q"}) + "\n")
    with pytest.raises(
        InvalidInputError, match=r"bad.jsonl, record 0: missing field 'image'.*fields present: id, question"
    ):
        load("visa_paper", bad, image_dir=tmp_path)


def test_parquet_without_pyarrow_names_the_extra(tmp_path: Path) -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("pyarrow is installed; the parquet path is tested below")
    pq = tmp_path / "x.parquet"
    pq.write_bytes(b"PAR1")
    with pytest.raises(MissingDependencyError, match=r"evidra\[data\]"):
        load("docvqa", pq)


def test_parquet_shards_read_like_jsonl(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as papq

    rows = [json.loads(line) for line in (FIX / "infovqa" / "validation.jsonl").read_text().splitlines()]
    papq.write_table(pa.Table.from_pylist(rows), tmp_path / "validation-00000-of-00001.parquet")
    (info,) = load("infovqa", tmp_path, image_dir=tmp_path / "img")
    assert info.answers == ("52%", "52")


def test_chartqa_original_json_and_lmms(tmp_path: Path) -> None:
    (orig,) = load("chartqa", FIX / "chartqa" / "test_human.json", image_dir=tmp_path)
    assert orig.answers == ("47",) and orig.question == "What is the peak value?"
    assert orig.pages[0].image_path.endswith("41699051005347.png")
    (lmms,) = load("chartqa", FIX / "chartqa" / "lmms" / "test.jsonl", image_dir=tmp_path)
    assert lmms.answers == ("Blue",) and lmms.extras["subset"] == "augmented"


def test_docvqa_and_infovqa(tmp_path: Path) -> None:
    (doc,) = load("docvqa", FIX / "docvqa" / "val_v1.0.json", image_dir=tmp_path)
    assert doc.id == "52212" and doc.answers == ("Edward R. Shannon", "Edward Shannon")
    assert doc.pages[0].size == (60, 80) and doc.extras["docId"] == 1968
    (info,) = load("infovqa", FIX / "infovqa", image_dir=tmp_path)
    assert info.answers == ("52%", "52") and info.pages[0].size == (50, 90)


def test_mpdocvqa_original_and_lmms_strings(tmp_path: Path) -> None:
    (orig,) = load("mpdocvqa", FIX / "mpdocvqa" / "val.json", image_dir=tmp_path)
    assert [p.id for p in orig.pages] == ["ffbf0023_p0", "ffbf0023_p1", "ffbf0023_p2"]
    assert orig.gold_pages == ("ffbf0023_p1",) and orig.answers == ("$ 35.00",)
    (lmms,) = load("mpdocvqa", FIX / "mpdocvqa" / "lmms" / "val.jsonl", image_dir=tmp_path)
    assert lmms.answers == ("J. Smith", "John Smith") and len(lmms.pages) == 2
    assert lmms.gold_pages == ("abcd0001_p0",) and lmms.pages[1].page_number == 2


def test_slidevqa_one_based_pages_and_xywh(tmp_path: Path) -> None:
    (s,) = load(
        "slidevqa", FIX / "slidevqa" / "test.jsonl", n_slides=3, bboxes=FIX / "slidevqa" / "bboxes.jsonl"
    )
    assert s.gold_pages == ("deck-a_2", "deck-a_3") and s.id == "7"
    assert s.extras["layout_boxes"][2][0]["box"] == (10.0, 5.0, 30.0, 13.0)  # [x, y, w, h] -> xyxy


def test_slidevqa_relative_data_path_is_not_doubled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(FIX.parent)  # the path as a user types it, relative to the working folder
    (s,) = load("slidevqa", Path(FIX.name) / "slidevqa" / "test.jsonl", n_slides=3)
    assert all(Path(p.image_path).is_file() for p in s.pages)
    assert (
        Path(s.pages[0].image_path) == Path(FIX.name) / "slidevqa" / "images" / "deck-a" / "slide_1_1024.jpg"
    )


def test_vidoseek_pdf_pages(tmp_path: Path) -> None:
    (s,) = load(
        "vidoseek",
        FIX / "vidoseek" / "vidoseek.json",
        documents=FIX / "vidoseek" / "docs",
        store=tmp_path / "store",
        dpi=36,
    )
    assert len(s.pages) == 3 and [p.page_number for p in s.pages] == [1, 2, 3]
    assert s.gold_pages == (s.pages[1].id, s.pages[2].id)  # reference_page [2, 3] is 1-based
    assert s.extras["beir_gold"] == ["report_2", "report_3"] and s.extras["hops"] == "2"


def test_mmlongbench_string_lists_and_unanswerable(tmp_path: Path) -> None:
    mmlb = FIX / "mmlongbench"
    listed, none = load(
        "mmlongbench", mmlb / "samples.json", documents=mmlb / "documents", store=tmp_path, dpi=36
    )
    assert listed.answer_type == "list" and listed.gold_pages == tuple(p.id for p in listed.pages)
    assert (
        listed.extras["evidence_sources"] == ["Pure-text (Plain-text)"]
        and listed.extras["page_kind"] == "cross"
    )
    assert not none.answerable and none.answers == ("Not answerable",) and none.gold_pages == ()


def test_beir_layouts(tmp_path: Path) -> None:
    q1, q2 = load("vidore", FIX / "beir")
    assert q1.gold_pages == ("1",) and q1.qrels == {"1": 2.0, "0": 0.0} and q1.dataset == "vidore"
    assert q2.gold_pages == ("2",)
    (v,) = load("visrag", FIX / "visrag")
    assert v.gold_pages == ("doc-a.png",) and v.answers == ("yes",)
    from evidra.data.loaders.beir import load_beir_corpus

    assert [p.id for p in load_beir_corpus(FIX / "beir", image_dir=tmp_path)] == ["0", "1", "2"]


def test_datasets_cache_arrow_files(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.ipc as ipc

    rows = [json.loads(line) for line in (FIX / "infovqa" / "validation.jsonl").read_text().splitlines()]
    cache = tmp_path / "lmms-lab___doc_vqa" / "InfographicVQA" / "0.0.0" / "abc123"
    cache.mkdir(parents=True)
    table = pa.Table.from_pylist(rows)
    with ipc.new_stream(cache / "doc_vqa-validation.arrow", table.schema) as writer:  # datasets' layout
        writer.write_table(table)
    (cache / "dataset_info.json").write_text("{}")  # cache metadata is not a record file
    (info,) = load("infovqa", tmp_path / "lmms-lab___doc_vqa", image_dir=tmp_path / "img")
    assert info.id == "65718" and info.pages[0].size == (50, 90)


def test_vidore_v1_dedupes_queries_and_images(tmp_path: Path) -> None:
    from evidra.data.loaders.vidore_v1 import load_vidore_v1_corpus

    total, signed = load("vidore_v1", FIX / "vidore_v1" / "test.jsonl")
    assert total.question == "What is the total?" and total.gold_pages == ("docvqa/ffbf0023_1.png",)
    assert signed.qrels == {"docvqa/abcd_3.png": 1.0}
    pages = load_vidore_v1_corpus(FIX / "vidore_v1" / "test.jsonl", image_dir=tmp_path)
    assert [p.id for p in pages] == ["docvqa/ffbf0023_1.png", "docvqa/abcd_2.png", "docvqa/abcd_3.png"]


def test_visa_official_resize_frame(tmp_path: Path) -> None:
    (s,) = load(
        "visa_wiki",
        FIX / "visa" / "test.jsonl",
        oracle=True,
        official_resize=True,
        image_dir=tmp_path,
        limit=1,
    )
    # 98 px wide -> 700: ratio 98 / 700 = 0.14; int(4 / 0.14) = 28, int(120 / 0.14) = 857,
    # int(53 / 0.14) = 378, and 140 / 0.14 = 999.999... in floating point: truncated to 999 as upstream
    assert s.pages[0].size == (700, 2800) and s.gold_boxes[0].box.as_tuple() == (28.0, 857.0, 378.0, 999.0)
    assert s.extras["stratum"] == "first_page_passage"  # strata still use the original pixels
    with Image.open(s.pages[0].image_path) as im:
        assert im.size == (700, 2800)


def _top3_fixture(root: Path) -> Path:
    """An ``EVisRAG-Test-DocVQA/top3_test.jsonl`` of two questions over four page images."""
    folder = root / "EVisRAG-Test-DocVQA"
    (folder / "imgs").mkdir(parents=True)
    for i, size in enumerate([(40, 50), (60, 30), (20, 20), (30, 30)]):
        Image.new("RGB", size, "white").save(folder / "imgs" / f"p{i}.png")
    rows = [
        {
            "qid": "q1",
            "query": "Who signed the letter?",
            "image": ["imgs/p0.png", "imgs/p1.png", "imgs/p2.png", "imgs/p3.png"],
            "answer": ["Richard W. Mann", "R. W. Mann"],
            "is_sufficient": True,
        },
        {
            "qid": "q2",
            "query": "What year?",
            "image": ["imgs/p2.png", "imgs/p0.png", "imgs/p3.png"],
            "answer": ["1967"],
            "is_sufficient": False,
        },
    ]
    path = folder / "top3_test.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_evisrag_top3_pages_in_rank_order_with_sufficiency(tmp_path: Path) -> None:
    path = _top3_fixture(tmp_path)
    q1, q2 = load("evisrag_top3", path)
    assert [p.id for p in q1.pages] == ["imgs/p0.png", "imgs/p1.png", "imgs/p2.png"]  # the 4th is cut
    assert (q1.pages[1].width, q1.pages[1].height) == (60, 30)
    assert q1.answers == ("Richard W. Mann", "R. W. Mann") and q1.sufficient is True
    assert q2.sufficient is False and q2.answerable and q2.gold_pages == ()
    assert q2.pages[0].id == q1.pages[2].id  # one page, whoever retrieved it
    assert q1.extras["benchmark"] == "EVisRAG-Test-DocVQA"
    (one,) = load("evisrag_top3", path.parent, topk=1, limit=1)  # a folder of benchmarks
    assert [p.id for p in one.pages] == ["imgs/p0.png"]


def test_evisrag_top3_insufficient_context_is_scored_as_a_refusal(tmp_path: Path) -> None:
    from evidra.eval.sample_scoring import evisrag_scores

    _, q2 = load("evisrag_top3", _top3_fixture(tmp_path))
    assert evisrag_scores(q2, "insufficient to answer")["evisrag_acc"] == 1.0
    assert evisrag_scores(q2, "1967")["evisrag_acc"] == 0.0  # the answer is not in the shown pages


def test_evisrag_top3_bad_records(tmp_path: Path) -> None:
    path = _top3_fixture(tmp_path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text(json.dumps({**rows[0], "is_sufficient": "yes"}) + "\n")
    with pytest.raises(InvalidInputError, match=r"record 0: is_sufficient must be true or false, got 'yes'"):
        load("evisrag_top3", path)
    path.write_text(json.dumps({k: v for k, v in rows[0].items() if k != "is_sufficient"}) + "\n")
    with pytest.raises(InvalidInputError, match="missing field 'is_sufficient'"):
        load("evisrag_top3", path)
    with pytest.raises(InvalidInputError, match="topk must be >= 1"):
        load("evisrag_top3", path, topk=0)
