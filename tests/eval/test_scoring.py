"""Per-sample scores: official metrics, LAT EM/IoU@0.5, EVisRAG with sufficiency, retrieval, process."""

from __future__ import annotations

import json

import pytest

from evidra.core.geometry import vision_spec
from evidra.core.types import Box, CoordSpace, EvidenceBox, Page, Parsed, Sample, Step
from evidra.env.environment import StepInfo
from evidra.eval.runner import RawEpisode, to_prediction
from evidra.eval.sample_scoring import Prediction, score
from evidra.metrics.text import braced_answer

PAGES = (Page("p1", "/x/p1.png", 200, 100), Page("p2", "/x/p2.png", 200, 100))


def _sample(**kw: object) -> Sample:
    gold = (EvidenceBox("p2", Box(10, 10, 50, 30)),)
    base: dict[str, object] = {"id": "s", "question": "How many?", "answers": ("Jane Doe",), "pages": PAGES}
    base.update(gold_pages=("p2",), gold_boxes=gold)
    base.update(kw)
    return Sample(**base)  # type: ignore[arg-type]


def test_lat_iou50_needs_the_right_page_and_overlap() -> None:
    s = _sample(dataset="visa_wiki")
    # IoU of (10,10,50,30) and (20,10,50,30): 600 / 800 = 0.75
    hit = score(s, Prediction("s", ("t",), "Jane Doe", answer_page=1, answer_box=(20, 10, 50, 30)))
    assert hit["em"] == 1.0 and hit["iou50"] == 1.0
    wrong_page = score(s, Prediction("s", ("t",), "Jane Doe", answer_page=0, answer_box=(20, 10, 50, 30)))
    assert wrong_page["iou50"] == 0.0
    # IoU of (10,10,50,30) and (40,10,80,30): 200 / 1400 < 0.5
    assert score(s, Prediction("s", ("t",), "x", answer_page=1, answer_box=(40, 10, 80, 30)))["iou50"] == 0.0


def test_lat_iou50_counts_only_an_iou_above_one_half() -> None:
    """LAT §5.1: IoU@0.5 is the share of answer boxes whose IoU with the gold box "exceeds 0.5"."""
    s = _sample(dataset="visa_wiki")
    # gold (10,10,50,30), area 800; (10,10,30,30): intersection 400, union 800 -> IoU exactly 0.5
    at_half = score(s, Prediction("s", ("t",), "Jane Doe", answer_page=1, answer_box=(10, 10, 30, 30)))
    assert at_half["iou50"] == 0.0
    # (10,10,31,30): intersection 420, union 800 -> IoU 0.525
    above = score(s, Prediction("s", ("t",), "Jane Doe", answer_page=1, answer_box=(10, 10, 31, 30)))
    assert above["iou50"] == 1.0


def test_unanswerable_visa_rule() -> None:
    s = _sample(answerable=False, gold_pages=(), gold_boxes=(), answers=("No Answer",))
    ok = score(s, Prediction("s", ("t",), "No answer."))
    assert ok["em"] == 1.0 and ok["iou50"] == 1.0
    boxed = score(s, Prediction("s", ("t",), "No answer", answer_page=0, answer_box=(0, 0, 1, 1)))
    assert boxed["em"] == 1.0 and boxed["iou50"] == 0.0  # a box on a no-answer item is wrong


def test_evisrag_gold_becomes_insufficient() -> None:
    s = _sample(sufficient=False)
    assert score(s, Prediction("s", ("t",), "insufficient to answer"))["evisrag_acc"] == 1.0
    assert score(s, Prediction("s", ("t",), "Jane Doe"))["evisrag_acc"] == 0.0
    # sufficient: bag-of-words F1 of "jane" vs "jane doe" = 2 * 1 * 0.5 / 1.5
    f1 = score(_sample(sufficient=True), Prediction("s", ("t",), "Jane"))["evisrag_f1"]
    assert f1 == pytest.approx(2 / 3, abs=1e-6)


def test_official_per_dataset() -> None:
    mp = _sample(dataset="mpdocvqa", answers=("35.00",))
    got = score(mp, Prediction("s", ("t",), "35.00", answer_page=1))
    assert got["anls"] == 1.0 and got["appa"] == 1.0
    assert score(mp, Prediction("s", ("t",), "none", answer_page=0))["anls"] == 0.0
    chart = _sample(dataset="chartqa", answers=("47",))
    assert score(chart, Prediction("s", ("t",), "48.5"))["relaxed_accuracy"] == 1.0  # 1.5 / 47 < 5%
    tv = _sample(dataset="tunnel_circuits", answers=("C3",))
    assert score(tv, Prediction("s", ("t",), "It is {c3} I think"))["synthetic_accuracy"] == 1.0
    assert braced_answer("no braces ") == "no braces"
    assert "exact_match" in score(_sample(dataset="unknown"), Prediction("s", ("t",), "Jane Doe"))


def test_retrieval_and_process_from_infos() -> None:
    s = _sample()
    infos = (
        StepInfo("search", retrieved=("p1", "p9")),
        StepInfo("bbox", page_id="p2", crop=(0, 0, 20, 20)),  # overlaps the gold box: useful
        StepInfo("bbox", page_id="p1", crop=(0, 0, 20, 20)),  # wrong page: not useful
        StepInfo("invalid"),
        StepInfo("search", retrieved=("p2",)),
        StepInfo("answer"),
    )
    got = score(s, Prediction("s", ("a",) * 6, "Jane Doe", infos=infos, n_tokens=40, finished=False))
    # ranking p1, p9, p2 against gold {p2}: recall@1 = 0, recall@5 = 1, MRR@10 = 1/3
    assert got["recall@1"] == 0.0 and got["recall@5"] == 1.0 and got["mrr@10"] == pytest.approx(1 / 3)
    assert got["invalid_rate"] == pytest.approx(1 / 6) and got["tool_calls"] == 4.0
    assert got["useful_zoom_rate"] == 0.5 and got["turns"] == 6.0 and got["finished"] == 0.0
    # a zoom that names no page: a single shown page is the zoomed one
    one = _sample(pages=PAGES[1:])
    zoom = (StepInfo("zoom", crop=(30, 20, 60, 40)), StepInfo("zoom", crop=(100, 60, 150, 90)))
    assert score(one, Prediction("s", ("a", "b"), None, infos=zoom))["useful_zoom_rate"] == 0.5


class _Norm1000:
    """A paradigm whose parser returns Qwen2-VL style 0..1000 boxes."""

    name = "norm"

    def parse(self, text: str) -> Parsed:
        box = Box(100, 100, 300, 300, CoordSpace.NORM1000)
        return Parsed(text, answer="Jane", answer_box=box, answer_page=0, steps=(Step("look", 0, box),))


def test_to_prediction_converts_boxes_to_page_pixels() -> None:
    page = Page("p1", "/x/p1.png", 1000, 500)
    s = Sample(
        "s",
        "q?",
        ("Jane",),
        pages=(page,),
        gold_pages=("p1",),
        gold_boxes=(EvidenceBox("p1", Box(100, 50, 300, 150)),),
        dataset="visa_wiki",
    )
    pred = to_prediction(
        s, RawEpisode(("t",), (StepInfo(),), 9, True, 0.1), _Norm1000(), vision_spec("qwen2_vl")
    )  # type: ignore[arg-type]
    # 0..1000 -> page pixels: x * 1000 / 1000, y * 500 / 1000
    assert pred.answer_box == (100.0, 50.0, 300.0, 150.0) and pred.steps[0].box == (100.0, 50.0, 300.0, 150.0)
    assert pred.scores["iou50"] == 1.0 and pred.scores["em"] == 1.0 and pred.n_tokens == 9


class _Constant:
    """A similarity that scores every (crop, text) pair the same."""

    def __init__(self, value: float) -> None:
        self.value = value

    def score(self, crops: object, texts: list[str]) -> list[float]:
        return [self.value] * len(texts)


def test_stepwise_attribution_is_opt_in(tmp_path: object) -> None:
    from pathlib import Path

    from PIL import Image

    from evidra.methods.lat.evaluation import stepwise_attribution_scorer

    path = Path(str(tmp_path)) / "p.png"
    Image.new("RGB", (400, 300), "white").save(path)
    page = Page("p1", str(path), 400, 300)
    s = Sample("s", "q?", ("Jane",), pages=(page,), gold_pages=("p1",))
    box = 'Bounding box: {"bbox_2d": [10, 10, 200, 60], "Image_index": 1}'
    text = f"<think>The header names Jane. {box}</think>\n<answer>Jane\n{box}</answer>"
    p = Prediction("s", (text,), "Jane")
    assert "sa" not in score(s, p)
    # one step: (1[min cos >= 0.3] + 1[max IoU <= delta]) / 2 (LAT Eq. 8) -> 1.0 and 0.5
    assert score(s, p, [stepwise_attribution_scorer(_Constant(0.9))])["sa"] == 1.0  # type: ignore[arg-type]
    assert score(s, p, [stepwise_attribution_scorer(_Constant(0.1))])["sa"] == 0.5  # type: ignore[arg-type]


def test_judge_scorer_with_the_offline_rule_judge() -> None:
    from evidra.eval.sample_scoring import judge_scorer
    from evidra.rewards.judge import RuleJudge

    s = _sample(dataset="vidoseek", answers=("It rose",))
    judged = judge_scorer(RuleJudge("contains"))
    assert score(s, Prediction("s", ("t",), "Profit: it rose by 5%"), [judged])["judge_accuracy"] == 1.0
    assert score(s, Prediction("s", ("t",), "It fell"), [judged])["judge_accuracy"] == 0.0
    assert "judge_accuracy" not in score(_sample(answers=()), Prediction("s", ("t",), "x"), [judged])


def test_step_infos_survive_the_prediction_cache_row() -> None:
    from evidra.eval.runner import prediction_from_json, prediction_to_json

    infos = (
        StepInfo("search", query="revenue", page_id="p1", retrieved=("p1",), turn=1),
        StepInfo("bbox", page_id="p1", crop=(1, 2, 30, 40), area_ratio=0.25, retrieved=("p1",), turn=2),
        StepInfo("invalid", invalid=True, reason="no action", invalid_count=1, turn=3),
        StepInfo("answer", answer="42", retrieved=("p1",), turn=4),
    )
    row = json.loads(prediction_to_json(Prediction("s", ("a",) * 4, "42", infos=infos), {"run": "r"}))
    assert row["infos"][1] == {
        "action": "bbox",
        "page_id": "p1",
        "crop": [1, 2, 30, 40],
        "area_ratio": 0.25,
        "retrieved": ["p1"],
        "turn": 2,
    }
    assert prediction_from_json(row).infos == infos
    # rows written before the record was typed: unknown keys are ignored
    assert StepInfo.from_json({"action": "zoom", "round": 2, "crop": [0, 0, 5, 5]}) == StepInfo(
        "zoom", crop=(0, 0, 5, 5)
    )
