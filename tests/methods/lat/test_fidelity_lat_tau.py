"""LAT's tau = 0.3 (§4) is a threshold on ColQwen2's score: the recipe takes ColQwen2 when a retriever
is given, and otherwise scores R_step with the word overlap against a tau calibrated for it on
evidra's synthetic documents (``benchmarks/calibrate_lat_tau.py``)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.config import load_config
from evidra.core.errors import InvalidInputError
from evidra.core.types import Page, Parsed, Sample
from evidra.methods import Resources, build_task
from evidra.methods.lat.calibration import balanced_accuracy, best_threshold
from evidra.methods.lat.reward import LatReward, LazySimilarity
from evidra.methods.lat.similarity import LAT_TAU, TEXT_OVERLAP_TAU, StepQuery, TextOverlapSimilarity
from evidra.rl.run_config import RLConfig

ROOT = Path(__file__).parents[3]


class _Constant:
    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        return [0.5 for _ in queries]


def _reward(cfg: RLConfig, resources: Resources | None = None) -> LatReward:
    reward = build_task(cfg.method, resources).reward
    assert isinstance(reward, LatReward)
    return reward


def test_best_threshold_hand_computed() -> None:
    # scores 0.1 F, 0.3 T, 0.4 F, 0.7 T, 0.9 T; candidates 0.2, 0.35, 0.55, 0.8
    # balanced accuracy: 0.2 -> (3/3 + 1/2) / 2 = 0.75; 0.35 -> (2/3 + 1/2) / 2 = 0.583;
    # 0.55 -> (2/3 + 2/2) / 2 = 0.833; 0.8 -> (1/3 + 1) / 2 = 0.667
    scores, labels = [0.1, 0.3, 0.4, 0.7, 0.9], [False, True, False, True, True]
    cal = best_threshold(scores, labels)
    assert cal.tau == pytest.approx(0.55) and cal.balanced_accuracy == pytest.approx(5 / 6)
    assert (cal.correct, cal.incorrect) == (3, 2)
    assert balanced_accuracy(scores, labels, 0.35) == pytest.approx(7 / 12)
    # separable: 0.2 | 0.6 | 0.7 all perfect from 0.4 up to 0.65; the middle of the tied run
    assert best_threshold([0.1, 0.3, 0.5, 0.8], [False, False, True, True]).tau == pytest.approx(0.4)
    # 1/3 and 1/3 + 1e-12 (one fraction, two float roundings) are one value: the candidates are
    # 1/6 and 0.6167, both at balanced accuracy 0.75, never a threshold between the two roundings
    third = [1 / 3, 1 / 3 + 1e-12, 0.9, 0.0]
    assert best_threshold(third, [True, False, True, False]).tau == pytest.approx(1 / 6)
    with pytest.raises(InvalidInputError, match="both"):
        best_threshold([0.1, 0.2], [True, True])


def test_the_recipe_takes_colqwen2_when_a_retriever_is_given() -> None:
    """The checkpoint is loaded on the first reward call, so building never loads it."""
    cfg = load_config(
        RLConfig, ROOT / "configs/lat.yaml", ["model.path=x", "method.similarity_checkpoint=ckpt/cq2"]
    )
    reward = _reward(cfg)
    assert isinstance(reward.similarity, LazySimilarity) and reward.config.tau == LAT_TAU == 0.3


def test_offline_the_recipe_uses_the_word_overlap_with_its_calibrated_tau() -> None:
    cfg = load_config(RLConfig, ROOT / "configs/lat.yaml", ["model.path=x"])
    assert cfg.method["similarity"] == "auto"
    reward = _reward(cfg)
    assert isinstance(reward.similarity, TextOverlapSimilarity) and reward.config.tau == TEXT_OVERLAP_TAU
    # a similarity handed in gets the tau of its scale
    assert _reward(cfg, Resources(similarity=TextOverlapSimilarity())).config.tau == TEXT_OVERLAP_TAU
    assert _reward(cfg, Resources(similarity=_Constant())).config.tau == LAT_TAU


class _Overlap(TextOverlapSimilarity):
    """A word-overlap similarity that scores every step ``value`` (its scale is the word overlap's)."""

    def __init__(self, value: float) -> None:
        super().__init__(ocr=False)
        object.__setattr__(self, "value", value)

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        return [self.value for _ in queries]  # type: ignore[attr-defined]


class _Retriever:
    def __init__(self, value: float) -> None:
        self.value = value

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        return [self.value for _ in queries]


def test_a_step_between_the_two_taus_is_judged_on_its_own_scale(tmp_path: Path) -> None:
    """Two steps on distinct boxes, both scoring S halfway between 0.3 and the calibrated tau, a
    correct answer: R_step = (1[S >= tau] + 1[I <= delta]) / 2 (Eq. 8) is 1 on ColQwen2's scale
    (S >= 0.3) and 0.5 on the word overlap's (S < its tau)."""
    between = (LAT_TAU + TEXT_OVERLAP_TAU) / 2
    assert LAT_TAU < between < TEXT_OVERLAP_TAU
    path = tmp_path / "p.png"
    Image.new("RGB", (1000, 1400)).save(path)
    page = Page(id="p1", image_path=str(path), width=1000, height=1400)
    sample = Sample("s", "who?", ("John Williams",), pages=(page,), gold_pages=("p1",))
    box = 'Bounding box: {{"bbox_2d": [{}], "Image_index": 1}}'
    text = (
        f"<think>The header. {box.format('10, 10, 200, 60')}\nThe table. {box.format('10, 300, 500, 400')}"
        "</think>\n<answer>John Williams</answer>"
    )
    cfg = load_config(RLConfig, ROOT / "configs/lat.yaml", ["model.path=x"])
    for similarity, expected in ((_Retriever(between), 1.0), (_Overlap(between), 0.5)):
        result = _reward(cfg, Resources(similarity=similarity))(Parsed(text=text), sample)
        assert result.components["step"] == expected, similarity


@pytest.mark.slow
def test_the_recorded_tau_is_what_the_calibration_computes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """benchmarks/calibrate_lat_tau.py on a small corpus: the calibrated threshold is within 0.02
    of the recorded one and separates the labelled steps at least as well as 0.3."""
    spec = importlib.util.spec_from_file_location(
        "calibrate_lat_tau", ROOT / "benchmarks/calibrate_lat_tau.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    steps = module.labelled_steps(module._samples(16, 0, tmp_path), 0)
    scores = TextOverlapSimilarity(ocr=False).score_steps([q for q, _ in steps])
    labels = [label for _, label in steps]
    cal = best_threshold(scores, labels)
    assert abs(cal.tau - TEXT_OVERLAP_TAU) <= 0.02
    assert balanced_accuracy(scores, labels, TEXT_OVERLAP_TAU) >= balanced_accuracy(scores, labels, LAT_TAU)
