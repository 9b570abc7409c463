"""Similarity services of LAT's stepwise attribution: text overlap (hand-computed) and ColQwen2."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from evidra.core.types import Box, EvidenceBox, Page, Sample, Word
from evidra.methods.lat.paradigm import parse_coe
from evidra.methods.lat.reward import LatReward
from evidra.methods.lat.rules import LatConfig
from evidra.methods.lat.similarity import (
    ColQwen2Similarity,
    StepQuery,
    TextOverlapSimilarity,
    maxsim_mean,
    token_f1,
    tokens,
    verify_steps,
    words_in_box,
)


@pytest.fixture
def page(tmp_path: Path) -> Page:
    path = tmp_path / "p.png"
    Image.new("RGB", (200, 100), "white").save(path)
    words = [
        ("Revenue", (10, 10, 60, 20)),
        ("2023", (70, 10, 100, 20)),
        ("was", (10, 30, 30, 40)),
        ("$5M", (40, 30, 70, 40)),
    ]
    return Page("p1", str(path), 200, 100, words=tuple(Word(t, Box(*map(float, b))) for t, b in words))


def test_tokens_and_f1_by_hand() -> None:
    assert tokens("Zürich, 2023: $5M!") == ["zürich", "2023", "5m"]
    assert token_f1(["a", "b"], ["a", "b"]) == 1.0
    assert token_f1(["a", "a", "b"], ["a", "c"]) == pytest.approx(0.4)  # p 1/3, r 1/2
    assert token_f1([], ["a"]) == 0.0


def test_words_are_in_a_box_when_their_centre_is(page: Page) -> None:
    assert words_in_box(page, Box(0, 0, 200, 25)) == ["Revenue", "2023"]
    assert words_in_box(page, Box(0, 0, 36, 100)) == ["Revenue", "was"]  # centres x = 35, 20
    assert words_in_box(page, Box(150, 50, 200, 100)) == []


def test_text_overlap_scores_hand_computed(page: Page) -> None:
    sim = TextOverlapSimilarity()
    queries = [
        StepQuery(page, Box(0, 0, 200, 25), "Revenue 2023"),  # 1.0
        StepQuery(
            page, Box(0, 25, 200, 45), "It was $5M"
        ),  # box {was, 5m} vs {it, was, 5m}: p 1, r 2/3 -> 0.8
        StepQuery(page, Box(0, 0, 200, 100), "profit"),  # 0
    ]
    assert sim.score_steps(queries) == pytest.approx([1.0, 0.8, 0.0])


def test_maxsim_mean_by_hand() -> None:
    q = torch.tensor([[1.0, 0.0], [0.0, 2.0]])  # normalised: e1, e2
    d = torch.tensor([[3.0, 0.0], [1.0, 1.0]])  # normalised: e1, (e1 + e2) / sqrt 2
    # token 1: max(1, 0.7071) = 1; token 2: max(0, 0.7071) -> mean (1 + 0.7071) / 2
    assert maxsim_mean(q, d) == pytest.approx((1 + 2**-0.5) / 2)


def test_verify_steps_marks_each_step(page: Page) -> None:
    text = (
        '<think>Revenue 2023. Bounding box: {"bbox_2d": [0, 0, 200, 25], "Image_index": 1} '
        'It was $5M. Bounding box: {"bbox_2d": [150, 50, 200, 100], "Image_index": 1} '
        'Profit. Bounding box: {"bbox_2d": [0, 0, 500, 25], "Image_index": 1} '
        'Next. Bounding box: {"bbox_2d": [0, 0, 5, 5], "Image_index": 3}</think><answer>$5M</answer>'
    )
    verdicts = verify_steps(parse_coe(text), [page], TextOverlapSimilarity())
    assert [(v.index, v.supported, v.reason) for v in verdicts] == [
        (1, True, "similarity 1.000 >= tau 0.3"),
        (2, False, "similarity 0.000 < tau 0.3"),
        (3, False, "box outside the page"),
        (4, False, "cited page does not exist"),
    ]
    assert verdicts[0].page_id == "p1" and verdicts[0].box == Box(0, 0, 200, 25)


@pytest.mark.slow
def test_colqwen2_similarity_on_the_tiny_checkpoint(tiny_dirs: dict[str, Path], page: Page) -> None:
    sim = ColQwen2Similarity.load(tiny_dirs["colqwen2"])
    crops = [page.open_image().crop((0, 0, 120, 40)), page.open_image().crop((0, 30, 200, 100))]
    scores = sim.score(crops, ["Revenue 2023", "It was $5M"])
    assert len(scores) == 2 and all(-1.0 <= s <= 1.0 for s in scores)
    # batched == one at a time (padding must not leak into MaxSim)
    single = [sim.score([c], [t])[0] for c, t in zip(crops, ["Revenue 2023", "It was $5M"], strict=True)]
    assert scores == pytest.approx(single, abs=1e-5)
    by_box = sim.score_steps([StepQuery(page, Box(0, 0, 120, 40), "Revenue 2023")])
    assert by_box == pytest.approx(scores[:1], abs=1e-5)
    thin = sim.score_steps(
        [StepQuery(page, Box(0, 0, 200, 0.4), "a rule"), StepQuery(page, Box(0, 0, 1, 100), "x")]
    )
    assert all(-1.0 <= t <= 1.0 for t in thin)  # 200 x 1 px and 1 x 100 px crops still score
    # it plugs into LAT's reward as its Similarity service
    sample = Sample(
        id="s",
        question="q",
        answers=("$5M",),
        pages=(page,),
        gold_pages=("p1",),
        gold_boxes=(EvidenceBox("p1", Box(40, 30, 70, 40)),),
    )
    text = (
        '<think>Revenue. Bounding box: {"bbox_2d": [0, 0, 120, 40], "Image_index": 1}</think>'
        "<answer>$5M</answer>"
    )
    tau_low = LatReward(weights={"step": 1.0}, similarity=sim, config=LatConfig(tau=-1.0))
    assert tau_low(parse_coe(text), sample).components["step"] == 1.0
