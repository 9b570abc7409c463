"""Each model family's box, as that family writes it, lands on the right word of the page."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evidra.core.box_formats import BOX_FORMATS, FAMILIES, box_format_for, squash
from evidra.core.errors import InvalidInputError, RegistryError
from evidra.core.geometry import VISION_SPECS, ImageFrame, clip_box, convert_box, iou, model_input_size
from evidra.core.types import Box, CoordSpace, Page, Word
from evidra.methods.lat.similarity import words_in_box

DOCS = Path(__file__).resolve().parents[1] / "docs" / "box-formats.md"
W, H = 4960, 7016  # A4 scanned at 600 dpi: large enough that Qwen2.5-VL's resize shrinks it
REVENUE = Box(1200, 1800, 2100, 1980)
PAGE = Page(
    "doc-p0001",
    "page.png",
    W,
    H,
    words=(
        Word("Total", Box(300, 1800, 1100, 1980)),
        Word("Revenue", REVENUE),
        Word("2023", Box(2200, 1800, 2900, 1980)),
        Word("Costs", Box(1200, 2100, 2100, 2280)),  # the line below
    ),
)

# The "Revenue" box (1200, 1800, 2100, 1980) as each family writes it, rounded as a model would:
# * 0-1000 grid: 1200/4960*1000 = 241.9 -> 242, 1800/7016*1000 = 256.6 -> 257,
#   2100/4960*1000 = 423.4 -> 423, 1980/7016*1000 = 282.2 -> 282;
# * Gemini: the same grid in (ymin, xmin, ymax, xmax) order;
# * Molmo: percent, 24.2 25.7 42.3 28.2; LLaVA: fractions, 0.242 0.257 0.423 0.282;
# * Qwen2.5-VL: smart_resize(7016, 4960) with max 12,845,056 px: beta = sqrt(4960*7016/12845056)
#   = 1.6460, h = floor(7016/1.6460/28)*28 = 4256, w = floor(4960/1.6460/28)*28 = 2996, so
#   x1 = 1200*2996/4960 = 724.8 -> 725, y1 = 1800*4256/7016 = 1091.9 -> 1092,
#   x2 = 2100*2996/4960 = 1268.5 -> 1268, y2 = 1980*4256/7016 = 1201.1 -> 1201;
# * Qwen2.5-VL in-process at max_pixels 1,003,520: the image becomes 840 x 1176, so
#   1200*840/4960 = 203.2 -> 203, 1800*1176/7016 = 301.7 -> 302, 355.6 -> 356, 331.9 -> 332;
# * pixels of the image as an endpoint is sent it (the long side cut to 2048: 1448 x 2048):
#   1200*1448/4960 = 350.3 -> 350, 1800*2048/7016 = 525.4 -> 525, 613.1 -> 613, 578.0 -> 578;
# * pixels of the image as sent at 150 dpi (1240 x 1754, a quarter per side): 300 450 525 495.
GRID: list[float] = [242, 257, 423, 282]
KNOWN: list[tuple[str, list[float], tuple[int, int] | None]] = [
    ("page", [1200, 1800, 2100, 1980], None),
    ("qwen2.5-vl", [725, 1092, 1268, 1201], None),
    ("qwen2.5-vl", [203, 302, 356, 332], (840, 1176)),
    ("qwen2-vl", GRID, None),
    ("qwen3-vl", GRID, None),
    ("norm1000", GRID, None),
    ("gemini", [257, 242, 282, 423], None),
    ("molmo", [24.2, 25.7, 42.3, 28.2], None),
    ("norm1", [0.242, 0.257, 0.423, 0.282], None),
    ("pixels", [350, 525, 613, 578], None),
    ("pixels", [300, 450, 525, 495], (1240, 1754)),
]


@pytest.mark.parametrize(("name", "written", "seen"), KNOWN)
def test_a_known_box_lands_on_its_word(name: str, written: list[float], seen: tuple[int, int] | None) -> None:
    mapped = BOX_FORMATS.get(name).to_page(written, (W, H), seen)
    assert mapped.ok and mapped.box is not None, mapped.error
    assert mapped.box.space is CoordSpace.PAGE
    assert iou(mapped.box, REVENUE) > 0.9
    assert words_in_box(PAGE, mapped.box) == ["Revenue"]


def test_every_registered_format_has_a_known_box() -> None:
    assert {name for name, _, _ in KNOWN} == set(BOX_FORMATS.names())


def test_the_in_process_size_is_the_processor_s() -> None:
    spec = VISION_SPECS["qwen2_5_vl"].with_pixels(max_pixels=1003520)
    assert model_input_size(W, H, spec) == (840, 1176)
    assert BOX_FORMATS.get("qwen2.5-vl").seen_size((W, H)) == (2996, 4256)


def test_qwen25_mapping_is_geometry_s_own_conversion() -> None:
    written = Box(725, 1092, 1268, 1201, CoordSpace.MODEL)
    frame = ImageFrame.for_page(W, H, VISION_SPECS["qwen2_5_vl"])
    expected = clip_box(convert_box(written, CoordSpace.PAGE, frame), W, H)
    mapped = BOX_FORMATS.get("qwen2.5-vl").to_page(written.as_tuple(), (W, H))
    assert mapped.box is not None
    assert all(math.isclose(a, b) for a, b in zip(mapped.box.as_tuple(), expected.as_tuple(), strict=True))


def test_the_wrong_convention_does_not_land_on_the_word() -> None:
    # Qwen2.5-VL's y1 = 1092 is past the 0-1000 grid: refused, not placed somewhere else.
    assert not BOX_FORMATS.get("norm1000").to_page([725, 1092, 1268, 1201], (W, H)).ok
    # A 0-1000 box read as pixels is a small box near the top-left corner.
    misread = BOX_FORMATS.get("pixels").to_page(GRID, (W, H)).box
    assert misread is not None and iou(misread, REVENUE) == 0.0 and words_in_box(PAGE, misread) == []
    # Gemini's order read as (x, y) misses too.
    swapped = BOX_FORMATS.get("norm1000").to_page([257, 242, 282, 423], (W, H)).box
    assert swapped is not None and words_in_box(PAGE, swapped) == []


def test_a_small_overshoot_is_clipped_to_the_page() -> None:
    # 1005 is within the 1% slack of the 0-1000 grid: clipped to the page's right edge.
    mapped = BOX_FORMATS.get("norm1000").to_page([500, 0, 1005, 1000], (W, H))
    assert mapped.box is not None
    assert mapped.box.x2 == W and mapped.box.y2 == H and math.isclose(mapped.box.x1, 2480.0)


HOSTILE: list[object] = [
    [math.nan, 0, 10, 10],
    [0, 0, math.inf, 10],
    [-math.inf, 0, 10, 10],
    [-100, 10, 200, 300],  # negative beyond the 1% slack of every frame here
    [300, 400, 100, 200],  # both corners swapped
    [0, 0, 1e300, 1e300],
    [0, 0, 1e308, 1e308],  # finite, but overflows once a 0-1 grid is rescaled
    [0, 0, 10**400, 10],  # an int past float's range
    [],
    [1, 2, 3],
    [1, 2, 3, 4, 5],
    ["1", "2", "3", "4"],
    [None, None, None, None],
    [True, 0, 1, 1],
    "1, 2, 3, 4",
    {"x1": 1},
    [5, 5, 5, 5],  # no area
]


@pytest.mark.parametrize("name", sorted(BOX_FORMATS.names()))
def test_hostile_boxes_are_data_not_exceptions(name: str) -> None:
    fmt = BOX_FORMATS.get(name)
    for values in HOSTILE:
        mapped = fmt.to_page(values, (W, H))  # type: ignore[arg-type]
        assert not mapped.ok and mapped.box is None, (name, values)
        assert mapped.error and "\n" not in mapped.error, (name, values)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(sorted(BOX_FORMATS.names())),
    values=st.lists(st.floats(allow_nan=True, allow_infinity=True, width=64), min_size=0, max_size=6),
    size=st.tuples(st.integers(1, 9000), st.integers(1, 9000)),
)
def test_any_box_is_placed_inside_the_page_or_refused(
    name: str, values: list[float], size: tuple[int, int]
) -> None:
    mapped = BOX_FORMATS.get(name).to_page(values, size)
    if mapped.box is None:
        assert mapped.error
    else:
        box = mapped.box
        assert 0 <= box.x1 < box.x2 <= size[0] and 0 <= box.y1 < box.y2 <= size[1]


def test_a_page_the_family_cannot_resize_is_refused_as_data() -> None:
    mapped = BOX_FORMATS.get("qwen2.5-vl").to_page([0, 0, 10, 10], (20000, 20))  # aspect 1000:1
    assert not mapped.ok and mapped.error is not None and "aspect ratio" in mapped.error


def test_a_bad_page_size_is_the_caller_s_error() -> None:
    with pytest.raises(InvalidInputError, match="page size"):
        BOX_FORMATS.get("norm1000").to_page(GRID, (0, 100))
    with pytest.raises(InvalidInputError, match="seen size"):
        BOX_FORMATS.get("pixels").to_page(GRID, (W, H), (100, -1))


NAMES = [
    ("Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl"),
    ("qwen2.5vl:7b", "qwen2.5-vl"),  # Ollama
    ("Qwen/Qwen2.5-VL-72B-Instruct-AWQ", "qwen2.5-vl"),
    ("Qwen/Qwen2-VL-7B-Instruct", "qwen2-vl"),
    ("Qwen/Qwen3-VL-8B-Instruct", "qwen3-vl"),
    ("qwen3-vl:8b", "qwen3-vl"),
    ("gemini-2.0-flash", "gemini"),
    ("google/gemini-2.5-pro", "gemini"),
    ("InternVL3", "norm1000"),
    ("OpenGVLab/InternVL3-8B", "norm1000"),
    ("openbmb/MiniCPM-V-2_6", "norm1000"),
    ("minicpm-v", "norm1000"),
    ("zai-org/GLM-4.5V", "norm1000"),
    ("allenai/Molmo-7B-D-0924", "molmo"),
    ("llava", "norm1"),
    ("llava-hf/llava-1.5-7b-hf", "norm1"),
]


@pytest.mark.parametrize(("model", "expected"), NAMES)
def test_a_model_name_picks_its_family_s_format(model: str, expected: str) -> None:
    assert box_format_for(model, None, None).name == expected


@pytest.mark.parametrize(
    "model", ["gpt-4o", "Pixtral-12B", "google/gemma-3-27b-it", "microsoft/Phi-4-multimodal-instruct", None]
)
def test_an_unknown_model_gets_the_default_with_a_note(
    model: str | None, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="evidra.core.box_formats"):
        assert box_format_for(model, None, None).name == "norm1000"
    assert any(repr(model) in r.getMessage() and "--box-format" in r.getMessage() for r in caplog.records)


def test_the_config_is_read_before_the_name() -> None:
    assert box_format_for("my-finetune", {"model_type": "qwen2_5_vl"}, None).name == "qwen2.5-vl"
    arch = {"architectures": ["Qwen3VLForConditionalGeneration"]}
    assert box_format_for(None, arch, None).name == "qwen3-vl"
    assert box_format_for("Qwen2.5-VL-7B", {"model_type": "qwen2_vl"}, None).name == "qwen2-vl"
    # a config naming no known family leaves the choice to the name
    assert box_format_for("Qwen2.5-VL-7B", {"model_type": "gemma3"}, None).name == "qwen2.5-vl"


def test_a_hostile_config_is_skipped_not_trusted() -> None:
    assert box_format_for("gemini-pro", {"model_type": 5, "architectures": "Qwen2VL"}, None).name == "gemini"
    mixed = {"architectures": [None, 3, "InternVLChatModel"]}
    assert box_format_for(None, mixed, None).name == "norm1000"
    assert box_format_for("qwen2.5vl", ["qwen2_vl"], None).name == "qwen2.5-vl"  # type: ignore[arg-type]


def test_the_override_wins_over_config_and_name() -> None:
    config = {"model_type": "qwen2_5_vl"}
    assert box_format_for("Qwen/Qwen2.5-VL-7B-Instruct", config, "page").name == "page"
    assert box_format_for("gpt-4o", None, " Gemini ").name == "gemini"


def test_an_unknown_override_says_what_it_meant_in_one_line() -> None:
    with pytest.raises(RegistryError) as err:
        box_format_for("gpt-4o", None, "qwen25-vl")
    message = str(err.value)
    assert "did you mean 'qwen2.5-vl'" in message and "Known:" in message and "\n" not in message


def test_every_family_names_a_registered_format_and_squash_reads_separators() -> None:
    assert all(f.format in BOX_FORMATS for f in FAMILIES)
    assert squash("Qwen2_5_VLForConditionalGeneration") == "qwen25vlforconditionalgeneration"
    assert squash("qwen2.5vl:7b") == squash("Qwen2.5-VL-7B") == "qwen25vl7b"


def test_the_docs_table_lists_every_format() -> None:
    text = DOCS.read_text(encoding="utf-8")
    missing = [name for name in BOX_FORMATS.names() if f"| `{name}` |" not in text]
    assert not missing, f"{DOCS.name} has no table row for {missing}"
