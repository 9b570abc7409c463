"""A benchmark field of the wrong type is one line naming the file, the record and the field."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.data.loaders import load
from evidra.data.loaders._records import Record, as_float, as_int, as_list, as_mapping

FIX = Path(__file__).parents[2] / "fixtures" / "benchmarks"
REC = Record({}, Path("/data/set/test.jsonl"), 4)


def test_numbers_read_as_records_store_them() -> None:
    assert as_int(3, REC, "n") == 3 and as_int("3", REC, "n") == 3 and as_int(2.0, REC, "n") == 2
    assert as_float("0.5", REC, "s") == 0.5 and as_float(2, REC, "s") == 2.0
    assert as_list((1, 2), REC, "l") == [1, 2] and as_mapping({"a": 1}, REC, "m") == {"a": 1}


@pytest.mark.parametrize(
    ("read", "value", "words"),
    [
        (as_int, "two", "field 'n' must be an integer, got 'two'"),
        (as_int, None, "field 'n' must be an integer, got None"),
        (as_int, float("inf"), "field 'n' must be an integer, got inf"),
        (as_float, [1.0], "field 'n' must be a number, got [1.0]"),
        (as_list, "1, 2", "field 'n' must be a list, got '1, 2'"),
        (as_mapping, [1], "field 'n' must be an object, got [1]"),
    ],
)
def test_a_field_of_the_wrong_type_is_one_line(read: object, value: object, words: str) -> None:
    with pytest.raises(InvalidInputError) as info:
        read(value, REC, "n")  # type: ignore[operator]
    assert str(info.value) == f"/data/set/test.jsonl, record 4: {words}"


def _slidevqa(tmp_path: Path, bboxes: list[object]) -> Path:
    shutil.copytree(FIX / "slidevqa", tmp_path / "slidevqa")
    boxes = tmp_path / "slidevqa" / "bboxes.jsonl"
    boxes.write_text("".join(json.dumps({"deck_name": "deck-a", "bboxes": b}) + "\n" for b in bboxes))
    return boxes


@pytest.mark.parametrize(
    ("bboxes", "words"),
    [
        ("none", "field 'bboxes' must be a list, got 'none'"),
        ([[2]], "bboxes holds [2], not [page, boxes]"),
        ([["two", []]], "field 'bboxes' must be an integer, got 'two'"),
        ([[2, [7]]], "field 'bboxes' must be an object, got 7"),
        ([[2, [{"bbox": [1, 2, 3]}]]], "bbox must be [x, y, w, h], got [1, 2, 3]"),
        ([[2, [{"bbox": ["1", 2, 3, 4]}]]], "bbox must be [x, y, w, h], got ['1', 2, 3, 4]"),
    ],
)
def test_slidevqa_layout_boxes_of_another_shape(tmp_path: Path, bboxes: object, words: str) -> None:
    boxes = _slidevqa(tmp_path, [bboxes])
    with pytest.raises(InvalidInputError) as info:
        load("slidevqa", tmp_path / "slidevqa" / "test.jsonl", n_slides=3, bboxes=boxes)
    assert str(info.value) == f"{boxes}, record 0: {words}"


def test_slidevqa_layout_boxes_keep_their_numbers(tmp_path: Path) -> None:
    boxes = _slidevqa(tmp_path, [[[2, [{"bbox_id": 1, "class": "Text", "bbox": [1, 2, 3, 4]}]]]])
    (s,) = load("slidevqa", tmp_path / "slidevqa" / "test.jsonl", n_slides=3, bboxes=boxes)
    assert s.extras["layout_boxes"] == {2: [{"id": 1, "class": "Text", "box": (1, 2, 4, 6)}]}


def test_mpdocvqa_page_index_that_is_no_number(tmp_path: Path) -> None:
    shutil.copytree(FIX / "mpdocvqa", tmp_path / "mpdocvqa")
    path = tmp_path / "mpdocvqa" / "val.json"
    data = json.loads(path.read_text())
    data["data"][0]["answer_page_idx"] = "second"
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError) as info:
        load("mpdocvqa", path, image_dir=tmp_path)
    assert str(info.value) == f"{path}, record 0: field 'answer_page_idx' must be an integer, got 'second'"
