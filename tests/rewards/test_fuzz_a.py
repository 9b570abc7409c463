"""Fuzzing: random and adversarial model output through every parser and reward of part A.

Properties: nothing raises on model output, and every value stays in its documented range.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from evidra.methods.evisrag import reward as evisrag
from evidra.methods.lat import rules as lat_scoring
from evidra.methods.lat import upstream_boxes
from evidra.metrics import qa, text
from evidra.rewards import boxes, scopes

FRAGMENTS = [
    "<think>",
    "</think>",
    "<answer>",
    "</answer>",
    "<observe>",
    "</observe>",
    "<evidence>",
    "</evidence>",
    "Bounding box: ",
    '{"bbox_2d": [10, 10, 200, 60], "Image_index": 1}',
    "{'bbox_2d': [1, 2, 3, 4], 'image_index': 2}",
    '{"bbox_2d": [1e308, -5, "x", null], "Image_index": "0"}',
    '{"bbox_2d": [5, 5, 1000, 1400], "Image_index": 9}',
    '{"bbox_2d": [10, 10, 910, 14], "Image_index": 1}',
    "{",
    "}",
    "[1]:",
    "[2]:",
    "[6]:",
    "[2]",
    "no relevant information",
    "insufficient to answer",
    "No answer",
    "not",
    "John Williams",
    "1,234",
    "3.5%",
    "—",
    "中文",
    "\u0301",
    "\n",
    ". ",
    " ",
    "<bbox>[1, 2, 3, 4]</bbox>",
    "<bbox>[",
    "<|box_start|>(1,2),(3,4)<|box_end|>",
    "Target Document: 2",
    "Bounding Box: (1, 2), (3, 4)",
    "(bbox_2d: (5, 6, 7, 8), Image_index: 1)",
    "\x00",
    "\x1c",
    "[[[[[[[[[[",
]

model_text = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(FRAGMENTS), max_size=25).map("".join),
    st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=20).map("".join),
)
FAST = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class FuzzSimilarity:
    def score(self, crops: Sequence[Image.Image], texts: Sequence[str]) -> list[float]:
        return [(len(t) % 7) / 6 for t in texts]


PAGES = [Image.new("RGB", (1000, 1400)), Image.new("RGB", (300, 200))]


@FAST
@given(model_text, model_text)
def test_text_primitives_total(pred: str, gold: str) -> None:
    for norm in (
        text.normalize_squad(pred),
        text.normalize_lat(pred),
        text.normalize_lat(pred, upstream=False),
    ):
        assert isinstance(norm, str) and norm == norm.strip()
    for value in (
        text.set_f1(pred, gold),
        text.bow_f1(pred, gold),
        text.bow_f1(pred, gold, eps=1e-7),
        text.token_recall(text.normalize_lat(pred), text.normalize_lat(gold)),
        text.substring_em(pred, gold),
        text.exact_match(pred, gold),
    ):
        assert 0.0 <= value <= 1.0 + 1e-12
    assert isinstance(text.visa_answer_match(pred, gold), bool)
    assert isinstance(text.is_no_answer(pred), bool) and isinstance(text.is_insufficient(pred), bool)


@FAST
@given(model_text)
def test_parsers_never_raise(s: str) -> None:
    parsed = [*boxes.parse_lat_boxes(s), *boxes.parse_vrag_boxes(s), *boxes.parse_qwen2_boxes(s)]
    visa = boxes.parse_visa_box(s)
    if visa is not None:
        parsed.append(visa)
    for p in parsed:
        assert (p.box is None) == (p.error is not None) or p.error is not None
        if p.box is not None:
            assert p.box.x1 <= p.box.x2 and p.box.y1 <= p.box.y2
        assert p.page_index is None or p.page_index >= 0
    for tag in ("think", "answer", "a"):
        for which in ("first", "last"):
            got = boxes.extract_tag(s, tag, which)  # type: ignore[call-overload]
            assert got is None or got in s
        assert all(block in s for block in boxes.extract_tag(s, tag, "all"))
    meta = upstream_boxes.lat_extract_metadata(s)
    assert meta and all(isinstance(m["image_id"], int) for m in meta)


@FAST
@given(model_text, st.sampled_from(["John Williams", "", "1,234", "No answer", "中文"]), st.booleans())
def test_lat_rewards_in_range(s: str, gold: str, answerable: bool) -> None:
    for rules in lat_scoring.LAT_RULES:
        r = lat_scoring.LAT_RULES.get(rules)
        assert 0.0 <= r.accuracy(s, gold, answerable=answerable) <= 1.0
        g = r.ground(s, [10, 10, 200, 60], 0 if answerable else None)
        assert g in (0.0, 1.0)
        step = lat_scoring.step_reward(s, gold, PAGES, FuzzSimilarity(), answerable=answerable, rules=r)
        assert step in (0.0, 0.5, 1.0)
    assert lat_scoring.format_reward(s) in (-1.0, 1.0)
    assert lat_scoring.eval_accuracy(s, gold) in (0, 1)


@FAST
@given(model_text, st.integers(min_value=-10, max_value=5000))
def test_evisrag_rewards_in_range(s: str, length: int) -> None:
    gold = "<evidence>[1]: revenue was 5 million dollars\n[2]: no relevant information</evidence>"
    gold += "<answer>5</answer>"
    assert 0.0 <= evisrag.perception_paper(s, gold) <= 1.0
    assert 0.0 <= evisrag.perception_upstream(s, gold) <= 18.0
    assert 0.0 <= evisrag.derivation_paper(s, gold) <= 1.0
    assert 0.0 <= evisrag.derivation_upstream(s, gold) <= 1.0
    assert evisrag.format_reward(s) in (0.0, 1.0)
    assert evisrag.observe_punishment(s) in (-1.0, 0.0) and evisrag.think_punishment(s) in (-1.0, 0.0)
    assert -1.0 <= evisrag.soft_overlong_punishment(length) <= 0.0
    scores = evisrag.sum_all(s, length, gold)
    assert -4.0 <= scores["overall"] <= 3 + 3 * 18 + 1
    metrics = qa.evaluate_predictions(s, ["5", "no relevant information"])
    assert 0.0 <= float(metrics["f1"]) <= 1.0


@FAST
@given(
    st.lists(st.integers(min_value=0, max_value=6), max_size=40),
    st.dictionaries(
        st.sampled_from(["<think>", "<evidence>", "<answer>"]),
        st.lists(st.integers(0, 6), max_size=3),
        min_size=3,
    ),
)
def test_scope_masks_are_masks(ids: list[int], markers: dict[str, list[int]]) -> None:
    mask = [1] * len(ids)
    got = scopes.scope_masks(ids, mask, markers)
    assert set(got) == set(scopes.UPSTREAM_SCOPE_RULES)
    for m in got.values():
        assert len(m) == len(ids) and set(m) <= {0, 1}
        ones = [i for i, v in enumerate(m) if v]
        assert ones == list(range(ones[0], ones[-1] + 1)) if ones else True  # one contiguous span
