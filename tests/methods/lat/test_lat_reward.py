"""LAT rewards: replay of the released functions' recorded cases (upstream mode) and
hand-computed paper-mode cases."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from PIL import Image

from evidra.core.types import Box, EvidenceBox, Page, Parsed, Sample
from evidra.methods.lat.reward import LatReward
from evidra.methods.lat.rules import (
    LAT_RULES,
    UPSTREAM,
    LatConfig,
    accuracy_paper,
    accuracy_upstream,
    eval_accuracy,
    format_reward,
    ground_paper,
    ground_upstream,
    step_reward,
    stepwise_attribution,
)
from evidra.methods.lat.similarity import StepQuery
from evidra.methods.lat.upstream_boxes import (
    lat_extract_metadata,
    lat_has_similar_bbox,
    lat_iou_eval,
    lat_iou_train,
    py_int,
)
from evidra.metrics.text import normalize_lat, token_recall
from evidra.rewards.reward import REWARDS

Same = Callable[[Any, Any], bool]
UNMATCHABLE = 10**9


def bind(case: dict[str, Any], *names: str) -> list[Any]:
    """The case's arguments in the order of upstream's parameter ``names`` (args, then kwargs)."""
    values = dict(zip(names, case.get("args", []), strict=False)) | case.get("kwargs", {})
    return [values[n] for n in names if n in values]


# Upstream raised; we return a documented safe value instead (docs/rewards.md, deviations table).
DOCUMENTED_SAFE = {
    "lat_iou_train": {"ZeroDivisionError": 0.0, "IndexError": 0.0},
    "lat_has_similar_bbox": {"ZeroDivisionError": False, "IndexError": False},
    "lat_eval_extract_metadata": {
        "TypeError": [{"bbox": [0, 0, 0, 0], "image_id": 0}],
        "OverflowError": [{"bbox": [0, 0, 0, 0], "image_id": 0}],
        "RecursionError": [{"bbox": [0, 0, 0, 0], "image_id": 0}],
    },
}


def _check(name: str, case: dict[str, Any], got: Any, same: Callable[[Any, Any], bool]) -> None:
    if "exception" in case:
        safe = DOCUMENTED_SAFE.get(name, {})
        etype = case["exception"]["type"]
        assert etype in safe, f"upstream raised {etype}; no documented safe value for {name}"
        assert got == safe[etype]
    else:
        assert same(got, case["output"]), (got, case["output"])


def _contents(case: dict[str, Any]) -> list[str]:
    return [c[0]["content"] for c in case["kwargs"]["completions"]]


@pytest.mark.conformance("lat_normalize_text")
def test_normalize_text(case: dict[str, Any], same: Same) -> None:
    _check("lat_normalize_text", case, normalize_lat(*bind(case, "text")), same)


@pytest.mark.conformance("lat_calculate_f1_reward")
def test_calculate_f1_reward(case: dict[str, Any], same: Same) -> None:
    _check("lat_calculate_f1_reward", case, token_recall(*bind(case, "pred_norm", "gt_norm")), same)


@pytest.mark.conformance("lat_accuracy_reward")
def test_accuracy_reward_upstream(case: dict[str, Any], same: Same) -> None:
    kw = case["kwargs"]

    def run() -> list[float]:
        # upstream calls int(index_page) unguarded; our API takes a bool, so the caller's int()
        # raises the same class (TypeError / ValueError) for an index that is not an integer
        return [
            accuracy_upstream(c, a, answerable=int(i) != -1)
            for c, a, i in zip(_contents(case), kw["answer"], kw["index_page"], strict=True)
        ]

    if "exception" in case:
        with pytest.raises(getattr(builtins, case["exception"]["type"])):
            run()
        return
    _check("lat_accuracy_reward", case, run(), same)


@pytest.mark.conformance("lat_format_reward")
def test_format_reward(case: dict[str, Any], same: Same) -> None:
    _check("lat_format_reward", case, [format_reward(c) for c in _contents(case)], same)


@pytest.mark.conformance("lat_iou_train")
def test_iou_train(case: dict[str, Any], same: Same) -> None:
    _check("lat_iou_train", case, lat_iou_train(*bind(case, "box1", "box2")), same)


@pytest.mark.conformance("lat_iou_eval")
def test_iou_eval(case: dict[str, Any], same: Same) -> None:
    _check("lat_iou_eval", case, lat_iou_eval(*bind(case, "box1", "box2")), same)


@pytest.mark.conformance("lat_has_similar_bbox")
def test_has_similar_bbox(case: dict[str, Any], same: Same) -> None:
    args = bind(case, "bboxes", "result_id", "box", "image_id", "iou_threshold")
    _check("lat_has_similar_bbox", case, lat_has_similar_bbox(*args), same)


@pytest.mark.conformance("lat_iou_reward")
def test_iou_reward_upstream(case: dict[str, Any], same: Same) -> None:
    kw = case["kwargs"]
    got = [
        # an index_page that int() rejects makes upstream fall into its except: 0.0; an
        # unmatchable page reproduces that
        ground_upstream(c, s, UNMATCHABLE if py_int(i) is None else py_int(i))
        for c, s, i in zip(_contents(case), kw["solution"], kw["index_page"], strict=True)
    ]
    _check("lat_iou_reward", case, got, same)


@pytest.mark.conformance("lat_eval_acc_compute")
def test_eval_acc_compute(case: dict[str, Any], same: Same) -> None:
    _check("lat_eval_acc_compute", case, eval_accuracy(*bind(case, "content", "ground_truth")), same)


@pytest.mark.conformance("lat_eval_extract_metadata")
def test_eval_extract_metadata(case: dict[str, Any], same: Same) -> None:
    _check("lat_eval_extract_metadata", case, lat_extract_metadata(*bind(case, "input_str")), same)


class StubSimilarity:
    """Returns recorded per-query scores and records each call (query, crop size, page)."""

    def __init__(self, per_query: dict[str, float], default: float, names: dict[int, str]) -> None:
        self.per_query, self.default, self.names = per_query, default, names
        self.calls: list[tuple[str, list[int], str]] = []
        self.n_batches = 0

    def score(self, crops: Sequence[Image.Image], texts: Sequence[str]) -> list[float]:
        self.n_batches += 1
        for crop, text in zip(crops, texts, strict=True):
            self.calls.append((text, list(crop.size), self.names[crop.getpixel((0, 0))[0]]))  # type: ignore[index]
        return [self.per_query.get(t, self.default) for t in texts]


def _page(name: str, sizes: dict[str, list[int]], colors: dict[str, int]) -> Image.Image | None:
    if name not in sizes:
        return None
    colors.setdefault(name, len(colors) + 1)
    return Image.new("RGB", tuple(sizes[name]), (colors[name], 0, 0))


@pytest.mark.conformance("lat_step_reward_stubbed")
def test_step_reward_upstream(case: dict[str, Any], same: Same) -> None:
    kw, sizes = case["kwargs"], case["image_sizes"]
    got, calls = [], []
    for i, content in enumerate(_contents(case)):
        colors: dict[str, int] = {}
        cands = kw["candidates"][i]
        names = cands if cands else [kw["id"][i]]
        pages = [_page(n, sizes, colors) for n in names]
        sim = StubSimilarity(case["similarity"]["per_query"], case["similarity"]["default"], {})
        sim.names = {c: f"../data/visa/{kw['file'][i]}/image/{n}.bin" for n, c in colors.items()}
        index = py_int(kw["index_page"][i])  # upstream's failing int() comes after the reward is set
        got.append(
            step_reward(
                content,
                kw["answer"][i],
                pages,
                sim,
                answerable=index != -1,
                single_image=not cands,
                rules=UPSTREAM,
            )
        )
        assert sim.n_batches <= 1
        calls += sim.calls
    _check("lat_step_reward_stubbed", case, got, same)
    expected = [(c["query"], list(c["crop_size"]), c["image_path"]) for c in case["similarity_calls"]]
    assert calls == expected


# ---- paper mode, hand-computed ---------------------------------------------------------------

BOX = 'Bounding box: {{"bbox_2d": [{}], "Image_index": {}}}'


def _coe(steps: list[tuple[str, str, int]], answer: str) -> str:
    think = "\n".join(f"{t} {BOX.format(b, k)}" for t, b, k in steps)
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def test_accuracy_paper_hand_computed() -> None:
    # pred "williams" vs gold "john williams": substring -> EM 1; recall 1/2 -> (1 + 0.5) / 2
    assert accuracy_paper("<answer>Williams</answer>", "John Williams") == 0.75
    # no overlap: EM 0, recall 0
    assert accuracy_paper("<answer>Paris</answer>", "Lyon") == 0.0
    # missing tag / empty answer are 0 in paper mode (upstream: 'unkonw' / 0.5)
    assert accuracy_paper("Paris", "Paris") == 0.0
    assert accuracy_paper("<answer> . </answer>", "Paris") == 0.0
    # box citations are removed; numbers with units and percents keep their digits
    text = '<answer>12.5% Bounding box: {"bbox_2d": [1, 2, 3, 4], "Image_index": 1}</answer>'
    assert accuracy_paper(text, "12.5%") == 1.0
    # "1 - 2": paper normalisation gives "1 2" on both sides
    assert accuracy_paper("<answer>1 2</answer>", "1 - 2") == 1.0
    assert accuracy_upstream("<answer>1 2</answer>", "1 - 2") == 0.5  # "1  2" != "1 2"
    # unicode
    assert accuracy_paper("<answer>Ünïcode Straße</answer>", "ünïcode straße") == 1.0
    # paper mode also strips the cold-start box syntax and lower-case labels (upstream keeps them:
    # "paris bounding box bbox2d 1 2 3 4 imageindex 1" contains "paris", recall 1 -> 1.0 anyway)
    cold = "<answer>Paris. bounding box: (bbox_2d: (1, 2, 3, 4), Image_index: 1)</answer>"
    assert accuracy_paper(cold, "Paris") == 1.0
    assert accuracy_paper(cold, "Paris France") == 0.75  # "paris" in gold, recall 1/2


def test_accuracy_unanswerable() -> None:
    assert accuracy_paper("<answer>No answer.</answer>", "x", answerable=False) == 1.0
    assert accuracy_paper("<answer>I cannot find it</answer>", "x", answerable=False) == 0.0
    assert accuracy_upstream("<answer>I cannot find it</answer>", "x", answerable=False) == 1.0


def test_format_reward_cases() -> None:
    assert format_reward("  <think>a</think>\n<answer>b</answer>\n") == 1.0
    assert format_reward("<think>a</think><answer>b") == -1.0
    assert format_reward("") == -1.0


def test_ground_paper() -> None:
    good = _coe(
        [("s.", "10, 10, 100, 50", 2)], 'X Bounding box: {"bbox_2d": [10, 10, 100, 50], "Image_index": 2}'
    )
    assert ground_paper(good, [10, 10, 100, 50], 1) == 1.0
    assert ground_paper(good, [10, 10, 100, 50], 0) == 0.0  # wrong page
    # IoU([0,0,10,10],[0,0,10,20]) = 100/200 = 0.5, not > 0.5
    box = 'Bounding box: {"bbox_2d": [0, 0, 10, 10], "Image_index": 1}'
    half = f"<think>The cell. {box}</think><answer>X {box}</answer>"
    assert ground_paper(half, [0, 0, 10, 20], 0) == 0.0
    assert ground_paper(half, [0, 0, 10, 10], 0) == 1.0
    # Eq. 9 with B_ans in the chain's boxes: an answer box the reasoning never cites earns nothing,
    # in the paper's syntax or another accepted one, on another page, or with other coordinates
    uncited = f"<answer>X {box}</answer>"
    assert ground_paper(uncited, [0, 0, 10, 10], 0) == 0.0
    assert ground_upstream(uncited, [0, 0, 10, 10], 0) == 0.0
    other_page = f"<think>s. {box.replace('1}', '2}')}</think><answer>X {box}</answer>"
    assert ground_paper(other_page, [0, 0, 10, 10], 0) == 0.0
    nearby = f"<think>s. {box.replace('10, 10]', '10, 11]')}</think><answer>X {box}</answer>"
    assert ground_paper(nearby, [0, 0, 10, 10], 0) == 0.0
    spaced = '<think>s. Bounding box: {"bbox_2d": [0,0,10,10], "Image_index": 1}</think>'
    assert ground_paper(f"{spaced}<answer>X {box}</answer>", [0, 0, 10, 10], 0) == 1.0
    # only the FIRST answer box is B_ans; a second, correct box does not count
    two = (
        '<think>a. {"bbox_2d": [50, 50, 60, 60], "Image_index": 1} b. {"bbox_2d": [0, 0, 10, 10], '
        '"Image_index": 1}</think><answer>X {"bbox_2d": [50, 50, 60, 60], "Image_index": 1}, '
        '{"bbox_2d": [0, 0, 10, 10], "Image_index": 1}</answer>'
    )
    assert ground_paper(two, [0, 0, 10, 10], 0) == 0.0
    assert ground_paper("<answer>No answer</answer>", None, None) == 1.0
    assert ground_paper("<answer>Paris</answer>", None, None) == 0.0
    inverted = '<answer>{"bbox_2d": [10, 10, 0, 0], "Image_index": 1}</answer>'
    assert ground_paper(inverted, [0, 0, 10, 10], 0) == 0.0


class ConstSimilarity:
    def __init__(self, scores: dict[str, float], default: float = 0.5) -> None:
        self.scores, self.default = scores, default
        self.texts: list[str] = []

    def score(self, crops: Sequence[Image.Image], texts: Sequence[str]) -> list[float]:
        self.texts += list(texts)
        return [self.scores.get(t, self.default) for t in texts]

    def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
        """The same scores as a ``StepSimilarity`` (what ``LatReward`` asks)."""
        return self.score([], [q.text for q in queries])


PAGE = [Image.new("RGB", (1000, 1400))]


def test_step_paper_hand_computed() -> None:
    two = _coe(
        [("The header.", "10, 10, 200, 60", 1), ("The table.", "10, 300, 500, 400", 1)], "John Williams"
    )
    sim = ConstSimilarity({})
    # S = 0.5 >= 0.3, I = 0 <= 0.5, R_acc = 1 -> (1 + 1) / 2
    assert step_reward(two, "John Williams", PAGE, sim, single_image=True) == 1.0
    assert sim.texts == ["The header.", "The table."]
    # S < tau but I <= delta: paper Eq. 8 still gives 0.5 (upstream gives 0)
    low = ConstSimilarity({"The table.": 0.2})
    assert step_reward(two, "John Williams", PAGE, low, single_image=True) == 0.5
    assert step_reward(two, "John Williams", PAGE, low, single_image=True, rules=UPSTREAM) == 0.0
    # gate: R_acc("Paris", "John Williams") = 0 < 0.4
    assert (
        step_reward(two.replace("John Williams", "Paris"), "John Williams", PAGE, sim, single_image=True)
        == 0.0
    )


def test_step_paper_repeated_and_out_of_page_boxes() -> None:
    # repeated box: IoU = 1 > delta -> only the similarity half
    rep = _coe([("A.", "10, 10, 200, 60", 1), ("B.", "10, 10, 200, 60", 1)], "John Williams")
    assert step_reward(rep, "John Williams", PAGE, ConstSimilarity({}), single_image=True) == 0.5
    # a box outside the page scores similarity 0 -> S = 0 < tau
    out = _coe([("A.", "10, 10, 2000, 60", 1), ("B.", "10, 300, 500, 400", 1)], "John Williams")
    assert step_reward(out, "John Williams", PAGE, ConstSimilarity({}), single_image=True) == 0.5
    # x2 == width is inside the page in paper mode (upstream demands strict x2 < W)
    edge = _coe([("A.", "10, 10, 1000, 60", 1), ("B.", "10, 300, 500, 400", 1)], "John Williams")
    assert step_reward(edge, "John Williams", PAGE, ConstSimilarity({}), single_image=True) == 1.0
    # a single step is enough in paper mode (K >= 1); upstream needs two
    one = _coe([("A.", "10, 10, 200, 60", 1)], "John Williams")
    assert step_reward(one, "John Williams", PAGE, ConstSimilarity({}), single_image=True) == 1.0
    assert (
        step_reward(one, "John Williams", PAGE, ConstSimilarity({}), single_image=True, rules=UPSTREAM) == 0.0
    )
    # no think / no boxes -> 0
    assert step_reward("<answer>John Williams</answer>", "John Williams", PAGE, ConstSimilarity({})) == 0.0
    assert step_reward("<think>x</think><answer>John</answer>", "John", PAGE, ConstSimilarity({})) == 0.0


def test_step_multi_page_and_sa_metric() -> None:
    pages = [Image.new("RGB", (800, 1000)), Image.new("RGB", (900, 1200))]
    text = _coe([("A.", "10, 10, 200, 60", 1), ("B.", "10, 10, 200, 60", 2)], "x")
    # same box on different pages is not an overlap -> 1.0; page 3 does not exist -> S = 0
    assert step_reward(text, "x", pages, ConstSimilarity({})) == 1.0
    bad = _coe([("A.", "10, 10, 200, 60", 3), ("B.", "10, 10, 200, 60", 2)], "x")
    assert step_reward(bad, "x", pages, ConstSimilarity({})) == 0.5
    # SA drops the accuracy gate
    assert stepwise_attribution(text.replace("<answer>x", "<answer>wrong"), pages, ConstSimilarity({})) == 1.0
    assert step_reward(text, "x", pages, ConstSimilarity({}), config=LatConfig(tau=0.6)) == 0.5


def test_lat_reward_fn(tmp_path: Any) -> None:
    path = tmp_path / "p.png"
    Image.new("RGB", (1000, 1400)).save(path)
    page = Page(id="p1", image_path=str(path), width=1000, height=1400)
    sample = Sample(
        id="s",
        question="who?",
        answers=("John Williams",),
        pages=(page,),
        gold_pages=("p1",),
        gold_boxes=(EvidenceBox("p1", Box(10, 10, 200, 60)),),
    )
    text = _coe(
        [("A.", "10, 10, 200, 60", 1), ("B.", "10, 300, 500, 400", 1)],
        "John Williams " + BOX.format("10, 10, 200, 60", 1),
    )
    result = LatReward(similarity=ConstSimilarity({}))(Parsed(text=text), sample)
    assert dict(result.components) == {"accuracy": 1.0, "step": 1.0, "ground": 1.0, "format": 1.0}
    assert result.total == 4.0
    unscored = REWARDS.get("lat")(Parsed(text=text), sample)
    assert not unscored.scored
    assert REWARDS.get("lat.accuracy")(Parsed(text=text), sample).total == 1.0
    assert REWARDS.get("lat.format")(Parsed(text="junk"), sample).total == -1.0


def test_answerable_sample_without_gold_box_never_grounds(tmp_path: Any) -> None:
    """Most benchmarks have no answer box: R_ground is 0, and "No answer" must not earn it."""
    path = tmp_path / "p.png"
    Image.new("RGB", (1000, 1400)).save(path)
    page = Page(id="p1", image_path=str(path), width=1000, height=1400)
    boxless = Sample(id="s", question="who?", answers=("John Williams",), pages=(page,), gold_pages=("p1",))
    reward = LatReward(weights={"ground": 1.0})
    refusal = _coe([("A.", "10, 10, 200, 60", 1)], "No answer")
    boxed = _coe([("A.", "10, 10, 200, 60", 1)], "John Williams " + BOX.format("10, 10, 200, 60", 1))
    for rules in LAT_RULES:
        scored = LatReward(rules=LAT_RULES.get(rules), weights={"ground": 1.0})
        assert scored(Parsed(text=refusal), boxless).components["ground"] == 0.0
        assert scored(Parsed(text=boxed), boxless).components["ground"] == 0.0
    unanswerable = Sample(id="u", question="who?", answers=("No answer",), pages=(page,), answerable=False)
    assert reward(Parsed(text=refusal), unanswerable).components["ground"] == 1.0


def test_score_group_makes_one_similarity_call(tmp_path: Any) -> None:
    path = tmp_path / "p.png"
    Image.new("RGB", (1000, 1400)).save(path)
    page = Page(id="p1", image_path=str(path), width=1000, height=1400)
    sample = Sample(id="s", question="who?", answers=("John Williams",), pages=(page,))
    texts = [
        _coe([("A.", "10, 10, 200, 60", 1), ("B.", "10, 300, 500, 400", 1)], "John Williams"),
        _coe([("C.", "10, 10, 200, 60", 1)], "Paris"),  # gate fails: R_acc = 0
        "no tags at all",
    ]

    class Counting(ConstSimilarity):
        calls = 0

        def score_steps(self, queries: Sequence[StepQuery]) -> list[float]:
            Counting.calls += 1
            return super().score_steps(queries)

    sim = Counting({})
    results = LatReward(weights={"step": 1.0}, similarity=sim).score_group(
        [Parsed(text=t) for t in texts], sample
    )
    assert [r.total for r in results] == [1.0, 0.0, 0.0]
    assert Counting.calls == 1 and sim.texts == ["A.", "B.", "C."]
