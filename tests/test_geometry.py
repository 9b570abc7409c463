from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import (
    VISION_SPECS,
    ImageFrame,
    clip_box,
    convert_box,
    image_grid,
    iou,
    is_valid_box,
    max_pairwise_iou,
    model_input_size,
    num_image_tokens,
    smart_resize,
)
from evidra.core.types import Box, CoordSpace

CONFORMANCE = Path(__file__).resolve().parent / "fixtures" / "conformance"


def test_smart_resize_hand_computed() -> None:
    # A4 at 150 dpi: 1754/28 = 62.6 -> 63*28 = 1764; 1240/28 = 44.3 -> 44*28 = 1232; under the max.
    assert smart_resize(1754, 1240, 28, 3136, 12845056) == (1764, 1232)
    # Same page with transformers' class default max (1,003,520): beta = sqrt(1754*1240/1003520)
    beta = math.sqrt(1754 * 1240 / 1003520)
    assert (
        smart_resize(1754, 1240, 28, 3136, 1003520)
        == (
            math.floor(1754 / beta / 28) * 28,
            math.floor(1240 / beta / 28) * 28,
        )
        == (1176, 840)
    )
    # Small image grows: 20x20 -> 28x28 = 784 < 3136 -> beta = sqrt(3136/400) = 2.8 -> 56x56
    assert smart_resize(20, 20, 28, 3136, 1003520) == (56, 56)
    assert num_image_tokens(448, 448, VISION_SPECS["qwen2_5_vl"]) == 256
    assert num_image_tokens(1240, 1754, VISION_SPECS["qwen2_5_vl"]) == 2772


def test_smart_resize_rejects_extreme_aspect_and_bad_sizes() -> None:
    with pytest.raises(InvalidInputError, match="aspect ratio"):
        smart_resize(10, 2500)
    with pytest.raises(InvalidInputError, match="positive"):
        smart_resize(0, 100)
    with pytest.raises(InvalidInputError, match="shorter than the factor"):
        smart_resize(3000, 20, require_min_side=True)


def test_smart_resize_conformance_vrag() -> None:
    path = CONFORMANCE / "vrag_smart_resize.json"
    for case in json.loads(path.read_text())["cases"]:
        args, kwargs = case.get("args", []), case.get("kwargs", {})
        if "exception" in case:
            with pytest.raises(ValueError):
                smart_resize(*args, **kwargs, require_min_side=True)
        else:
            assert list(smart_resize(*args, **kwargs, require_min_side=True)) == case["output"], case


@settings(max_examples=300, deadline=None)
@given(
    h=st.integers(28, 6000),
    w=st.integers(28, 6000),
    arch=st.sampled_from(sorted(VISION_SPECS)),
    max_tokens=st.integers(64, 16384),
)
def test_smart_resize_invariants(h: int, w: int, arch: str, max_tokens: int) -> None:
    spec = VISION_SPECS[arch]
    if max(h, w) / min(h, w) > 200:
        return
    max_pixels = max(max_tokens * spec.factor**2, 2 * spec.min_pixels)
    nh, nw = smart_resize(h, w, spec.factor, spec.min_pixels, max_pixels)
    assert nh % spec.factor == 0 and nw % spec.factor == 0
    # the area limit holds unless a side was clamped up to one factor (extreme aspect ratios)
    assert nh * nw <= max_pixels or min(nh, nw) == spec.factor
    assert nh >= spec.factor and nw >= spec.factor
    # aspect ratio is kept to within one factor step on each side
    assert abs(nh / nw - h / w) <= (h / w) * (spec.factor / min(nh, nw)) * 2 + 1e-9


boxes_1000 = st.tuples(*[st.floats(0, 1000, allow_nan=False)] * 4).map(
    lambda t: Box.from_points(*t, CoordSpace.NORM1000)
)


@settings(max_examples=300, deadline=None)
@given(
    box=boxes_1000,
    w=st.integers(28, 5000),
    h=st.integers(28, 5000),
    arch=st.sampled_from(sorted(VISION_SPECS)),
)
def test_box_round_trips_between_spaces(box: Box, w: int, h: int, arch: str) -> None:
    if max(w, h) / min(w, h) > 200:
        return
    frame = ImageFrame.for_page(w, h, VISION_SPECS[arch])
    for via in (CoordSpace.PAGE, CoordSpace.MODEL):
        there = convert_box(box, via, frame)
        back = convert_box(there, CoordSpace.NORM1000, frame)
        assert back.space is CoordSpace.NORM1000
        assert all(
            math.isclose(a, b, abs_tol=1e-6) for a, b in zip(back.as_tuple(), box.as_tuple(), strict=True)
        )
    page = convert_box(box, CoordSpace.PAGE, frame)
    assert 0 <= page.x1 <= page.x2 <= w + 1e-6 and 0 <= page.y1 <= page.y2 <= h + 1e-6


def test_convert_box_hand_computed() -> None:
    # page 1000x500 shown as 700x336 model pixels (a made-up frame: scaling is per axis)
    frame = ImageFrame(1000, 500, 700, 336)
    model = convert_box(Box(100, 50, 200, 250), CoordSpace.MODEL, frame)
    assert model.as_tuple() == pytest.approx((70, 33.6, 140, 168))
    norm = convert_box(Box(100, 50, 200, 250), CoordSpace.NORM1000, frame)
    assert norm.as_tuple() == pytest.approx((100, 100, 200, 500))


def test_iou_and_validity() -> None:
    assert iou(Box(0, 0, 10, 10), Box(0, 0, 10, 10)) == 1.0
    assert iou(Box(0, 0, 10, 10), Box(5, 5, 15, 15)) == pytest.approx(25 / 175)
    assert iou(Box(0, 0, 10, 10), Box(10, 0, 20, 10)) == 0.0  # touching edges do not overlap
    assert iou(Box(3, 3, 3, 3), Box(3, 3, 3, 3)) == 0.0  # degenerate: zero union, no division error
    with pytest.raises(InvalidInputError):
        iou(Box(0, 0, 1, 1), Box(0, 0, 1, 1, CoordSpace.NORM1000))
    assert max_pairwise_iou([Box(0, 0, 10, 10), Box(20, 20, 30, 30), Box(0, 0, 10, 5)]) == pytest.approx(0.5)
    assert max_pairwise_iou([Box(0, 0, 1, 1)]) == 0.0
    assert clip_box(Box(-5, 2, 120, 80), 100, 50).as_tuple() == (0, 2, 100, 50)
    assert is_valid_box(Box(0, 0, 100, 50), 100, 50)
    assert not is_valid_box(Box(0, 0, 101, 50), 100, 50)
    assert not is_valid_box(Box(5, 5, 5, 9), 100, 50)


def test_box_validation_messages() -> None:
    with pytest.raises(InvalidInputError, match="from_points"):
        Box(10, 0, 5, 5)
    with pytest.raises(InvalidInputError, match="finite"):
        Box(0, 0, float("nan"), 1)
    assert Box.from_points(10, 8, 2, 1).as_tuple() == (2, 1, 10, 8)
    assert Box.from_xywh(1, 2, 3, 4).as_tuple() == (1, 2, 4, 6)


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_grid_prediction_matches_real_processor(tiny_vlms: dict[str, Any], arch: str) -> None:
    """The processor's image_grid_thw equals our prediction for many random sizes."""
    import numpy as np
    from PIL import Image

    vlm = tiny_vlms[arch]
    ip = vlm.processor.image_processor
    rng = random.Random(arch)
    sizes = [(rng.randint(16, 900), rng.randint(16, 900)) for _ in range(40)] + [
        (28, 28),
        (899, 30),
        (32, 640),
    ]
    images = [Image.fromarray(np.zeros((h, w, 3), dtype=np.uint8)) for w, h in sizes]
    grids = ip(images=images, return_tensors="pt")["image_grid_thw"].tolist()
    for (w, h), grid in zip(sizes, grids, strict=True):
        assert tuple(grid) == image_grid(w, h, vlm.spec), (arch, w, h)
        mw, mh = model_input_size(w, h, vlm.spec)
        assert (grid[1] * vlm.spec.patch_size, grid[2] * vlm.spec.patch_size) == (mh, mw)
