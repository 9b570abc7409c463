"""The crop and zoom actions read a box by the answering model's convention when one is set: the
same page region, written in each registered convention, crops the same pixels (within the few
pixels that whole-pixel crops and the model's own rounding allow); without one the box is pixels of
the image shown, as before."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.box_formats import BOX_FORMATS, BoxFormat
from evidra.core.geometry import VISION_SPECS, VisionSpec, process_image_size, smart_resize
from evidra.core.types import Box, Page, Sample, Word
from evidra.env.environment import StepInfo
from evidra.env.search import SearchEnv, bm25_searcher
from evidra.env.single_turn import SingleTurnEnv
from evidra.env.zoom import ZoomEnv
from evidra.eval.runner import EnvFactory, RawEpisode, RunConfig, boxes_read_as, run_eval
from evidra.methods.cave.paradigm import ZoomAgent
from evidra.paradigms.search_agent import SearchAgent

# 1300 x 1700 is shown at 554 x 724 (VRAG's process_image), which Qwen2.5-VL's resize makes
# 560 x 728: a page whose Qwen2.5-VL frame differs from the image shown.
SIZE = (1300, 1700)
FIRST = (260.0, 340.0, 910.0, 1020.0)  # a region of the page, in page pixels
SECOND = (390.0, 510.0, 650.0, 850.0)  # a region inside FIRST, cropped from the first crop
TOLERANCE = 4.0  # page pixels: whole-pixel crops (2.3 px a displayed pixel) and rounding
CALL = (
    '<think>t</think><tool_call>{{"name": "image_zoom_in_tool", "arguments": '
    '{{"bbox_2d": {box}}}}}</tool_call>'
)


@pytest.fixture()
def page(tmp_path: Path) -> Page:
    path = tmp_path / "p.png"
    Image.new("RGB", SIZE, "white").save(path)
    words = (Word("revenue", Box(10, 10, 90, 30)), Word("2021", Box(100, 10, 150, 30)))
    return Page("p", str(path), *SIZE, words=words)


def written(
    name: str, region: Sequence[float], shown: tuple[float, float, float, float], size: tuple[int, int]
) -> list[float]:
    """``region`` (page pixels) as a model of convention ``name`` writes it on an image showing the
    page region ``shown`` at ``size`` (w, h), by hand."""
    sx0, sy0, sx1, sy1 = shown
    fx1, fy1, fx2, fy2 = (
        (region[0] - sx0) / (sx1 - sx0),
        (region[1] - sy0) / (sy1 - sy0),
        (region[2] - sx0) / (sx1 - sx0),
        (region[3] - sy0) / (sy1 - sy0),
    )
    if name == "page":
        return list(region)
    if name in ("qwen2.5-vl", "pixels"):
        h, w = (
            smart_resize(size[1], size[0], 28, 56 * 56, 28 * 28 * 16384)
            if name == "qwen2.5-vl"
            else size[::-1]
        )
        return [fx1 * w, fy1 * h, fx2 * w, fy2 * h]
    unit = {"qwen2-vl": 1000, "qwen3-vl": 1000, "norm1000": 1000, "gemini": 1000, "molmo": 100, "norm1": 1}[
        name
    ]
    x1, y1, x2, y2 = (round(v * unit, 3) for v in (fx1, fy1, fx2, fy2))
    return [y1, x1, y2, x2] if name == "gemini" else [x1, y1, x2, y2]


def near(crop: tuple[int, int, int, int] | None, region: Sequence[float]) -> bool:
    return crop is not None and all(abs(a - b) <= TOLERANCE for a, b in zip(crop, region, strict=True))


def bbox(values: Sequence[float]) -> str:
    return f"<think>t</think><bbox>[{', '.join(f'{v:.3f}' for v in values)}]</bbox>"


def search_env(page: Page, fmt: BoxFormat | None) -> SearchEnv:
    env = SearchEnv(bm25_searcher([page]), {page.id: page}, box_format=fmt)
    env.reset(Sample(id="s", question="revenue in 2021?", answers=("x",)))
    shown = env.step("<think>t</think><search>revenue 2021</search>")
    assert shown.info.page_id == page.id
    return env


@pytest.mark.parametrize("name", BOX_FORMATS.names())
def test_a_box_in_each_convention_crops_the_same_page_region(page: Page, name: str) -> None:
    env = search_env(page, BOX_FORMATS.get(name))
    shown_size = process_image_size(*SIZE)
    first = env.step(bbox(written(name, FIRST, (0, 0, *SIZE), shown_size)))
    assert not first.info.invalid, first.info.reason
    assert near(first.info.crop, FIRST), (name, first.info.crop)
    # zooming into the crop: the box is read on the crop as shown, and lands inside the first region
    crop = first.info.crop
    assert crop is not None
    crop_size = process_image_size(crop[2] - crop[0], crop[3] - crop[1])
    region = (float(crop[0]), float(crop[1]), float(crop[2]), float(crop[3]))
    second = env.step(bbox(written(name, SECOND, region, crop_size)))
    assert not second.info.invalid, second.info.reason
    assert near(second.info.crop, SECOND), (name, second.info.crop)


def test_without_a_convention_the_box_is_pixels_of_the_image_shown(page: Page) -> None:
    """The default (training, evidra's checkpoints): the numbers scale from the 554 x 724 image."""
    default = search_env(page, None).step(bbox([100, 100, 300, 400]))
    sx, sy = SIZE[0] / 554, SIZE[1] / 724
    assert default.info.crop == (int(100 * sx), int(100 * sy), int(300 * sx), int(400 * sy))
    # the same numbers read on Qwen3-VL's 0-1000 grid are another region
    grid = search_env(page, BOX_FORMATS.get("qwen3-vl")).step(bbox([100, 100, 300, 400]))
    assert near(grid.info.crop, (130, 170, 390, 680))


def test_a_box_off_its_grid_is_an_invalid_action_that_says_why(page: Page) -> None:
    env = search_env(page, BOX_FORMATS.get("norm1"))
    step = env.step(bbox([0.1, 0.1, 3.0, 0.5]))
    assert step.info.invalid and "outside" in step.info.reason and env.invalid == 1


@pytest.mark.parametrize("name", BOX_FORMATS.names())
def test_a_zoom_box_in_each_convention_zooms_into_the_same_region(page: Page, name: str) -> None:
    env = ZoomEnv(ZoomAgent(), box_format=BOX_FORMATS.get(name))
    env.reset(Sample(id="z", question="What is written?", answers=("x",), pages=(page,)))
    values = written(name, FIRST, (0, 0, *SIZE), SIZE)  # the page goes whole: its own frame
    step = env.step(CALL.format(box=[round(v, 3) for v in values]))
    assert not step.info.invalid, step.info.reason
    assert near(step.info.crop, FIRST), (name, step.info.crop)


def test_a_zoom_box_without_a_convention_is_original_pixels(page: Page) -> None:
    env = ZoomEnv(ZoomAgent())
    env.reset(Sample(id="z", question="What is written?", answers=("x",), pages=(page,)))
    step = env.step(CALL.format(box="[260.7, 340, 910, 1020]"))
    assert step.info.crop == (260, 340, 910, 1020)


@dataclass(frozen=True)
class Backend:
    """A model backend that only records the box format of the environments it is given."""

    box_format: BoxFormat | None
    seen: list[object]
    spec: VisionSpec = VISION_SPECS["qwen2_5_vl"]

    def run(self, samples: Sequence[Sample], make_env: EnvFactory, cfg: RunConfig) -> list[RawEpisode]:
        out = []
        for sample in samples:
            env = make_env(sample)
            self.seen.append(getattr(env, "box_format", "none"))
            out.append(RawEpisode(("<answer>x</answer>",), (StepInfo(),), 1, True, 0.0))
        return out


@pytest.mark.parametrize("fmt", [None, BOX_FORMATS.get("qwen3-vl")])
def test_an_evaluation_hands_its_model_s_convention_to_every_environment(
    page: Page, tmp_path: Path, fmt: BoxFormat | None
) -> None:
    backend = Backend(fmt, [])
    samples = [Sample(id=f"s{i}", question="q?", answers=("x",), pages=(page,)) for i in range(2)]
    cfg = RunConfig("b", "search_agent", "m", batch_size=2)
    make = lambda s: SearchEnv(bm25_searcher([page]), {page.id: page})  # noqa: E731
    run_eval(samples, backend, cfg, tmp_path / "cache.jsonl", make_env=make)
    assert backend.seen == [fmt, fmt]


def test_an_environment_without_boxes_is_left_as_it_is() -> None:
    fmt = BOX_FORMATS.get("qwen3-vl")
    plain = boxes_read_as(lambda s: SingleTurnEnv(SearchAgent()), fmt)(Sample(id="s", question="q"))
    assert not hasattr(plain, "box_format")
    factory = lambda s: SingleTurnEnv(SearchAgent())  # noqa: E731
    assert boxes_read_as(factory, None) is factory
