"""Crop mapping: the three upstream conformance files replayed, and the paper-mode fix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import (
    Displayed,
    convert_to_qwen25vl_format,
    crop_displayed,
    map_crop,
    map_crop_upstream,
    process_image_size,
)

CONFORMANCE = Path(__file__).resolve().parent / "fixtures" / "conformance"


def _cases(name: str) -> list[dict[str, Any]]:
    path = CONFORMANCE / f"{name}.json"
    return list(json.loads(path.read_text())["cases"])


def test_process_image_conformance() -> None:
    cases = _cases("vrag_process_image")
    assert len(cases) == 8
    for case in cases:
        w, h, max_px, min_px = case["args"][:4]
        assert list(process_image_size(w, h, max_px, min_px)) == case["output"]["size"], case


def test_map_crop_conformance_upstream_mode() -> None:
    cases = _cases("vrag_map_crop")
    assert len(cases) == 8
    for case in cases:
        bbox, w, h, raw_w, raw_h, validation = case["args"]
        assert map_crop_upstream(bbox, w, h, raw_w, raw_h, validation) == case["output"], case
        last_page = Displayed("p", "p.png", (raw_w, raw_h), (0, 0, raw_w, raw_h), (raw_w, raw_h))
        shown = Displayed("p", "p.png", (raw_w, raw_h), (0, 0, raw_w, raw_h), (w, h))
        assert list(crop_displayed(bbox, shown, last_page, "upstream", validation)) == case["output"]
        # on a whole page both modes agree (except the unchecked inverted box, clamped alike)
        assert list(map_crop(bbox, shown, validation)) == case["output"]


def test_convert_to_qwen25vl_format_conformance() -> None:
    cases = _cases("vrag_convert_to_qwen25vl_format")
    assert len(cases) == 7
    for case in cases:
        assert convert_to_qwen25vl_format(*case["args"]) == case["output"], case


def test_hand_computed_page_and_crop_of_crop() -> None:
    # a 1000 x 2000 page shown at 500 x 1000 (scale 2)
    page = Displayed("p", "p.png", (1000, 2000), (0, 0, 1000, 2000), (500, 1000))
    assert map_crop([100, 200, 300, 400], page) == (200, 400, 600, 800)
    # that crop (400 x 400 raw) shown at 800 x 800 (scale 0.5), offset (200, 400)
    crop = Displayed("p", "p.png", (1000, 2000), (200, 400, 600, 800), (800, 800))
    assert map_crop([0, 0, 400, 400], crop) == (200, 400, 400, 600)
    assert map_crop([700, 700, 900, 900], crop) == (550, 750, 600, 800)  # clamped to the crop
    # upstream scales by the crop's display size but crops the page from its origin
    assert crop_displayed([0, 0, 400, 400], crop, page, "upstream") == (0, 0, 500, 1000)
    assert map_crop([10, 10, 20, 20], page, pad=True) == (0, 0, 96, 96)  # 28 px pad, x2 scale


def test_displayed_page_uses_process_image() -> None:
    shown = Displayed.page("p", "p.png", (1654, 2339))
    assert shown.size == (532, 753) and shown.region == (0, 0, 1654, 2339)
    with pytest.raises(InvalidInputError):
        process_image_size(0, 10)
