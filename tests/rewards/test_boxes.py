"""Box and tag parsers: well-formed, truncated and adversarial model output."""

from __future__ import annotations

import pytest

from evidra.core.types import CoordSpace
from evidra.methods.lat.upstream_boxes import lat_extract_metadata, lat_read_json_box, py_int, py_int_list
from evidra.rewards.boxes import (
    extract_tag,
    parse_lat_boxes,
    parse_qwen2_boxes,
    parse_visa_box,
    parse_vrag_boxes,
)


def test_lat_boxes_json_variants() -> None:
    text = (
        'A. Bounding box: {"bbox_2d": [1, 2, 3, 4], "Image_index": 1}\n'
        "B. Bounding box: {'BBOX_2D': [5, 6, 7.5, 8], 'image_index': '2'}\n"
        "C. (bbox_2d: (10, 20, 30, 40), Image_index: 3)"
    )
    boxes = parse_lat_boxes(text, CoordSpace.MODEL)
    assert [b.box.as_tuple() for b in boxes if b.box] == [(1, 2, 3, 4), (5, 6, 7.5, 8), (10, 20, 30, 40)]
    assert [b.page_index for b in boxes] == [0, 1, 2]
    assert all(b.ok and b.box is not None and b.box.space is CoordSpace.MODEL for b in boxes)
    assert text[boxes[0].start : boxes[0].end].startswith("{")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"bbox_2d": [1, 2, 3], "Image_index": 1}', "expected 4 coordinates, got 3"),
        ('{"bbox_2d": [10, 10, 0, 0], "Image_index": 1}', "inverted box (10.0, 10.0, 0.0, 0.0)"),
        ('{"bbox_2d": [1, 2, 3, 4], "Image_index": 0}', "page index 0 is not 1-based"),
        ('{"bbox_2d": [1, 2, 3, 4]}', "missing Image_index"),
        ('{"bbox_2d": [1, x, 3, 4], "Image_index": 1}', "coordinates are not finite numbers"),
        ('{"bbox_2d": [1e999, 2, 3, 4], "Image_index": 1}', "coordinates are not finite numbers"),
    ],
)
def test_lat_boxes_malformed(text: str, error: str) -> None:
    (parsed,) = parse_lat_boxes(text)
    assert not parsed.ok and parsed.error == error


def test_lat_boxes_ignores_groups_without_bbox() -> None:
    assert parse_lat_boxes("see (figure 2) and {x: 1}") == []


def test_visa_box() -> None:
    b = parse_visa_box("Answer: 1977\nTarget Document: 3\nBounding Box: (12, 30), (480, 95)")
    assert b is not None and b.box is not None
    assert b.box.as_tuple() == (12, 30, 480, 95) and b.page_index == 2
    missing = parse_visa_box("Answer: x\nTarget Document: 1")
    assert missing is not None and missing.error == "missing Bounding Box"
    assert parse_visa_box("No Answer") is None


def test_vrag_and_qwen2_boxes() -> None:
    (good, bad, short) = parse_vrag_boxes(
        '<bbox>[1, 2, 30.5, 40]</bbox><bbox>["1", 2, 3, 4]</bbox><bbox>[1,2]</bbox>'
    )
    assert (
        good.box is not None
        and good.box.as_tuple() == (1, 2, 30.5, 40)
        and good.box.space is CoordSpace.MODEL
    )
    assert bad.error == "bbox content is not a JSON list of numbers"
    assert short.error == "expected 4 coordinates, got 2"
    (q,) = parse_qwen2_boxes(
        "<|object_ref_start|>x<|object_ref_end|><|box_start|>(10,20),(300,400)<|box_end|>"
    )
    assert q.box is not None and q.box.space is CoordSpace.NORM1000 and q.box.as_tuple() == (10, 20, 300, 400)
    assert parse_qwen2_boxes("<|box_start|>(10,20)<|box_end|>") == []


def test_extract_tag() -> None:
    assert extract_tag("<answer>a</answer><answer>b</answer>", "answer", "last") == "b"
    assert extract_tag("<think>unfinished", "think") == "unfinished"  # truncated generation
    assert extract_tag("</answer>x<answer>y</answer>", "answer") == "y"  # stray close ignored
    assert extract_tag("<Answer>y</ANSWER>", "answer", ignore_case=True) == "y"
    assert extract_tag("<answer>y</answer>", "think", "all") == []
    assert extract_tag("<a><a>in</a>", "a", "all") == ["<a>in</a>"]  # outer block never closes


def test_lat_json_helpers() -> None:
    assert lat_read_json_box('{"bbox_2d": [1, 2, 3, 4]}').status == "key"
    assert lat_read_json_box("{'bbox_2d': [1, 2, 3, 4]}").status == "decode"
    assert py_int("7") == 7 and py_int("x") is None and py_int(float("inf")) is None
    assert py_int_list("12") == [1, 2]  # a string iterates its characters, as upstream
    assert py_int_list(5) is None
    # a null index: upstream TypeError escapes; we return the default (documented deviation)
    assert lat_extract_metadata('{"bbox_2d": [1, 2, 3, 4], "Image_index": null}') == [
        {"bbox": [0, 0, 0, 0], "image_id": 0}
    ]
