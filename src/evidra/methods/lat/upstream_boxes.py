"""LAT's released JSON-box helpers, reproduced for its upstream rules and its evaluation: the
training and evaluation IoUs, the duplicate-box test, the union, the JSON box reader and the
metadata extraction, each as the released code computes it (differences from the paper are noted
on each)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evidra.core.tagscan import find_blocks


def lat_iou_train(box1: Sequence[float], box2: Sequence[float]) -> float:
    """LAT training IoU (``src/grpo.py``): 0 if ``box1`` is not 4 long; no reordering.

    Documented deviation: upstream raises ZeroDivisionError when the union is 0, IndexError
    when ``box2`` is shorter than 4 and OverflowError for integers past float's range; here all
    three give 0.0.

    >>> lat_iou_train([0, 0, 14, 10], [0, 0, 10, 10])
    0.7142857142857143
    >>> lat_iou_train([0, 0, 10**400, 10], [0, 0, 10, 10])
    0.0
    """
    if len(box1) != 4 or len(box2) < 4:
        return 0.0
    ix1, iy1 = max(box1[0], box2[0]), max(box1[1], box2[1])
    ix2, iy2 = min(box1[2], box2[2]), min(box1[3], box2[3])
    inter = (ix2 - ix1) * (iy2 - iy1) if ix1 < ix2 and iy1 < iy2 else 0
    union = lat_box_union(box1, box2)
    try:
        return float(inter) / union if union != 0 else 0.0
    except OverflowError:  # integers past float's range (upstream raises): no overlap to measure
        return 0.0


def lat_iou_eval(box1: Sequence[float], box2: Sequence[float]) -> float:
    """LAT evaluation IoU (``src/evaluation.py``): 0.0 unless both are 4 long or if union is 0.

    >>> lat_iou_eval([0.5, 0.5, 10.5, 10.5], [0, 0, 10, 10])
    0.8223234624145785
    """
    if len(box1) != 4 or len(box2) != 4:
        return 0.0
    inter = max(0, min(box1[2], box2[2]) - max(box1[0], box2[0])) * max(
        0, min(box1[3], box2[3]) - max(box1[1], box2[1])
    )
    union = (box1[2] - box1[0]) * (box1[3] - box1[1]) + (box2[2] - box2[0]) * (box2[3] - box2[1]) - inter
    try:
        return 0.0 if union == 0 else float(inter) / union
    except OverflowError:  # integers past float's range (upstream raises): no overlap to measure
        return 0.0


def lat_has_similar_bbox(
    bboxes: Sequence[Sequence[float]],
    result_id: Sequence[object],
    box: Sequence[float],
    image_id: object,
    iou_threshold: float = 0.5,
) -> bool:
    """LAT's duplicate test: a previous box on the *same* ``Image_index`` (Python ``==``, so
    1 != "1") with training IoU >= threshold, checked in order.

    Documented deviation: where upstream raises (zero union -> ZeroDivisionError, ``box``
    shorter than 4 -> IndexError) before finding a duplicate, this returns False.

    >>> lat_has_similar_bbox([[0, 0, 10, 10]], [1], [0, 0, 10, 20], 1)
    True
    """
    for prev, rid in zip(bboxes, result_id, strict=False):
        if len(prev) == 4 and (len(box) < 4 or lat_box_union(prev, box) == 0):
            return False
        if lat_iou_train(prev, box) >= iou_threshold and rid == image_id:
            return True
    return False


def lat_box_union(a: Sequence[float], b: Sequence[float]) -> float:
    """Union area of two [x1, y1, x2, y2] boxes as LAT computes it (no reordering, can be <= 0)."""
    ix1, iy1, ix2, iy2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    inter = (ix2 - ix1) * (iy2 - iy1) if ix1 < ix2 and iy1 < iy2 else 0
    return (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter


@dataclass(frozen=True)
class LatJsonBox:
    """One ``{..}`` span read with upstream semantics: raw JSON values, or why it failed.

    ``status``: "ok"; "decode" (invalid JSON, upstream treats the step as unscored); "key"
    (a key is missing, upstream's KeyError aborts the whole reward); "fatal" (any other error).
    """

    status: Literal["ok", "decode", "key", "fatal"]
    bbox: object = None
    image_index: object = None


def lat_read_json_box(source: str) -> LatJsonBox:
    """Parse one LAT JSON box as upstream does: ``json.loads`` then the first key whose
    lowercase is ``bbox_2d`` / ``image_index``.

    >>> lat_read_json_box('{"BBOX_2D": [1,2,3,4], "image_index": "1"}')
    LatJsonBox(status='ok', bbox=[1, 2, 3, 4], image_index='1')
    """
    try:
        data = json.loads(source)
    except json.JSONDecodeError:
        return LatJsonBox("decode")
    except (ValueError, RecursionError):
        return LatJsonBox("fatal")
    if not isinstance(data, dict):
        return LatJsonBox("fatal")
    bbox_key = next((k for k in data if k.lower() == "bbox_2d"), None)
    index_key = next((k for k in data if k.lower() == "image_index"), None)
    if bbox_key is None or index_key is None:
        return LatJsonBox("key")
    return LatJsonBox("ok", data[bbox_key], data[index_key])


def py_int(value: object) -> int | None:
    """Python's ``int(value)`` or None where it would raise (upstream casts raw JSON values)."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None


def py_int_list(value: object) -> list[int] | None:
    """``[int(x) for x in value]`` or None where that would raise (a str iterates its chars)."""
    try:
        return [int(x) for x in value]  # type: ignore[attr-defined]
    except (TypeError, ValueError, OverflowError):
        return None


def lat_extract_metadata(text: str) -> list[dict[str, object]]:
    """LAT evaluation's ``extract_metadata``: every ``{..}`` (after ' -> ") as
    ``{"bbox": [int..], "image_id": int}``; any failure gives the single default box.

    Documented deviation: upstream lets a TypeError/OverflowError (e.g. ``"bbox_2d": 5`` or a
    null index) escape; here those also give the default.

    >>> lat_extract_metadata('{"bbox_2d": [1, 2, 3, 4], "Image_index": 1}')
    [{'bbox': [1, 2, 3, 4], 'image_id': 1}]
    """
    default: list[dict[str, object]] = [{"bbox": [0, 0, 0, 0], "image_id": 0}]
    spans = [b.group() for b in find_blocks(text.replace("'", '"'), "{", "}", dotall=False)]  # \{.*?\}
    if not spans:
        return default
    out: list[dict[str, object]] = []
    for span in spans:
        parsed = lat_read_json_box(span)
        if parsed.status != "ok":
            return default
        coords, index = py_int_list(parsed.bbox), py_int(parsed.image_index)
        if coords is None or index is None:
            return default
        out.append({"bbox": coords, "image_id": index})
    return out
