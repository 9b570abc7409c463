"""Evaluation places a model's boxes by its family's box convention when it is known (an endpoint's,
or one the user names), so a box from any family lands on the same page pixels."""

from __future__ import annotations

import pytest

from evidra.core.box_formats import BOX_FORMATS
from evidra.core.geometry import vision_spec
from evidra.core.types import Box, CoordSpace, Page, Sample
from evidra.eval.runner import BoxReading, EndpointModel, _reading
from evidra.paradigms import PARADIGMS

PAGE = Page("p1", "p1.png", 2000, 1000, "doc.pdf", 1)
SAMPLE = Sample(id="s", question="Q?", answers=("7",), pages=(PAGE,), gold_pages=("p1",))
SPEC = vision_spec("qwen2_5_vl")


def test_a_qwen3_vl_endpoint_box_on_the_0_1000_grid_lands_on_its_page_pixels() -> None:
    """Qwen3-VL writes 0-1000: (250, 100, 500, 300) is x 500-1000 and y 100-300 of a 2000 x 1000 page."""
    paradigm = PARADIGMS.get("search_agent")()
    parsed = paradigm.parse("<think>t</think><bbox>[250, 100, 500, 300]</bbox>")
    assert parsed.action is not None and parsed.action.box is not None
    assert parsed.action.box.space is CoordSpace.MODEL  # what the paradigm alone would assume
    reading = BoxReading(SPEC, BOX_FORMATS.get("qwen3-vl"))
    box = Box(250, 100, 500, 300, CoordSpace.MODEL)
    assert reading.page_box(box, PAGE) == pytest.approx((500.0, 100.0, 1000.0, 300.0))
    # the same numbers read as Qwen2.5-VL pixels of the resized page land elsewhere
    assert BoxReading(SPEC).page_box(box, PAGE) != pytest.approx((500.0, 100.0, 1000.0, 300.0))


def test_a_page_pixel_box_stays_and_an_unplaceable_box_is_none() -> None:
    reading = BoxReading(SPEC, BOX_FORMATS.get("qwen3-vl"))
    assert reading.page_box(Box(10, 20, 30, 40, CoordSpace.PAGE), PAGE) == (10, 20, 30, 40)
    assert reading.page_box(Box(0, 0, 1500, 1500, CoordSpace.MODEL), PAGE) is None  # off the 0-1000 grid
    assert reading.page_box(None, PAGE) is None and reading.page_box(Box(0, 0, 1, 1), None) is None


def test_an_endpoint_backend_is_read_by_its_box_format() -> None:
    from evidra.models.endpoint import ChatEndpoint

    endpoint = ChatEndpoint("http://127.0.0.1:9/v1", "Qwen/Qwen3-VL-8B-Instruct")
    reading = _reading(EndpointModel(endpoint, SPEC, box_format=BOX_FORMATS.get("qwen3-vl")))
    assert reading.box_format is BOX_FORMATS.get("qwen3-vl") and not reading.in_process
    assert _reading(EndpointModel(endpoint, SPEC)).box_format is None
