"""Boxes and the coordinate spaces between a page and what a model sees.

Three frames matter (see ``CoordSpace``):

* page pixels: the stored page image, where gold boxes live;
* model pixels: the image after Qwen's ``smart_resize`` (multiples of patch*merge). Qwen2.5-VL
  writes ``bbox_2d`` in absolute pixels of this resized image;
* 0..1000 normalised: Qwen2-VL (``<|box_start|>(x1,y1),(x2,y2)<|box_end|>``) and Qwen3-VL.

Which frame (and order) a given model family writes is registered in ``evidra.core.box_formats``,
which maps a model's box back to page pixels through ``convert_box`` below.

A page of size (W, H) shown to a model becomes (W', H') = smart_resize(H, W); a point maps as
x' = x * W'/W, y' = y * H'/H. Everything that converts between frames lives in this file,
including the crop-and-zoom frames of VRAG-RL's perception action (§2.2, Eq. 2; at the end):

* the policy writes ``<bbox>[x1, y1, x2, y2]</bbox>`` in the pixel frame of an image *as it was
  displayed*: a retrieved page after VRAG's ``process_image`` resize, or an earlier crop after the
  same resize. The box is mapped back to raw page pixels and that region is cropped and shown.
  In ``paper`` mode (default) the box is read in the frame of the last image displayed and mapped
  through that image's own region of the page, so zooming into a crop zooms further into the same
  region. ``upstream`` mode reproduces the released rollout, which scales by the size of the last
  image but crops the last *retrieved* page from its origin (wrong once the last image is itself a
  crop; recorded cases ``vrag_map_crop``).
* ``convert_to_qwen25vl_format`` is the rule of VRAG's SFT data script: boxes in original pixels
  become boxes in the smart-resized frame (recorded cases ``vrag_convert_to_qwen25vl_format``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry
from evidra.core.types import Box, CoordSpace

NORM_SCALE = 1000.0
MAX_ASPECT_RATIO = 200


@dataclass(frozen=True)
class VisionSpec:
    """How an architecture turns an image into tokens, and how it writes boxes."""

    arch: str
    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int
    box_space: CoordSpace

    @property
    def factor(self) -> int:
        """Side lengths are multiples of this (28 for Qwen2/2.5-VL, 32 for Qwen3-VL)."""
        return self.patch_size * self.merge_size

    def with_pixels(self, min_pixels: int | None = None, max_pixels: int | None = None) -> VisionSpec:
        return VisionSpec(
            self.arch,
            self.patch_size,
            self.merge_size,
            self.min_pixels if min_pixels is None else min_pixels,
            self.max_pixels if max_pixels is None else max_pixels,
            self.box_space,
        )


# Defaults of the released checkpoints' preprocessor_config.json (not transformers' class defaults).
VISION_SPECS: dict[str, VisionSpec] = {
    "qwen2_vl": VisionSpec("qwen2_vl", 14, 2, 56 * 56, 28 * 28 * 16384, CoordSpace.NORM1000),
    "qwen2_5_vl": VisionSpec("qwen2_5_vl", 14, 2, 56 * 56, 28 * 28 * 16384, CoordSpace.MODEL),
    "qwen3_vl": VisionSpec("qwen3_vl", 16, 2, 65536, 16777216, CoordSpace.NORM1000),
}


def vision_spec(arch: str) -> VisionSpec:
    try:
        return VISION_SPECS[arch]
    except KeyError:
        raise InvalidInputError(f"unknown architecture {arch!r}; known: {', '.join(VISION_SPECS)}") from None


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 1280,
    *,
    require_min_side: bool = False,
) -> tuple[int, int]:
    """Qwen-VL's resize rule: returns ``(new_height, new_width)``, both multiples of ``factor``.

    Sides are rounded to the nearest multiple (Python's round-half-to-even, as upstream); if the
    area exceeds ``max_pixels`` both sides shrink by sqrt(hw/max) rounding down, if it is under
    ``min_pixels`` both grow by sqrt(min/hw) rounding up. Argument order is (height, width).
    ``require_min_side`` rejects sides shorter than ``factor``, as qwen-vl-utils and VRAG-RL's
    copy do; transformers' processor (the default here) accepts them.

    >>> smart_resize(1754, 1240, 28, 3136, 12845056)
    (1764, 1232)
    >>> smart_resize(1754, 1240, 28, 3136, 1003520)
    (1176, 840)
    """
    if height <= 0 or width <= 0:
        raise InvalidInputError(f"image size must be positive, got height={height}, width={width}")
    if require_min_side and min(height, width) < factor:
        raise InvalidInputError(f"image {width}x{height} has a side shorter than the factor {factor}")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise InvalidInputError(
            f"image {width}x{height} has aspect ratio above {MAX_ASPECT_RATIO}; crop or pad it first"
        )
    h_bar = round(height / factor) * factor
    w_bar = round(width / factor) * factor
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def model_input_size(width: int, height: int, spec: VisionSpec) -> tuple[int, int]:
    """``(W', H')`` of a ``width x height`` image after the processor's resize."""
    h, w = smart_resize(height, width, spec.factor, spec.min_pixels, spec.max_pixels)
    return w, h


def image_grid(width: int, height: int, spec: VisionSpec) -> tuple[int, int, int]:
    """The processor's ``image_grid_thw`` for one still image: (1, H'/patch, W'/patch)."""
    w, h = model_input_size(width, height, spec)
    return 1, h // spec.patch_size, w // spec.patch_size


def num_image_tokens(width: int, height: int, spec: VisionSpec) -> int:
    """Number of ``<|image_pad|>`` tokens an image becomes: grid_h * grid_w / merge^2."""
    _, gh, gw = image_grid(width, height, spec)
    return gh * gw // (spec.merge_size**2)


@dataclass(frozen=True)
class ImageFrame:
    """One image as displayed: its page-pixel size and the model-input size it became."""

    page_width: int
    page_height: int
    model_width: int
    model_height: int

    @classmethod
    def for_page(cls, width: int, height: int, spec: VisionSpec) -> ImageFrame:
        mw, mh = model_input_size(width, height, spec)
        return cls(width, height, mw, mh)

    def size(self, space: CoordSpace) -> tuple[float, float]:
        """Width and height of the image in ``space`` units."""
        if space is CoordSpace.PAGE:
            return float(self.page_width), float(self.page_height)
        if space is CoordSpace.MODEL:
            return float(self.model_width), float(self.model_height)
        return NORM_SCALE, NORM_SCALE


def convert_box(box: Box, target: CoordSpace, frame: ImageFrame) -> Box:
    """Express ``box`` in ``target`` space for the image described by ``frame``.

    Scaling is linear per axis and exact (no rounding): round only when writing a prompt.
    """
    if box.space is target:
        return box
    sw, sh = frame.size(box.space)
    tw, th = frame.size(target)
    fx, fy = tw / sw, th / sh
    return Box(box.x1 * fx, box.y1 * fy, box.x2 * fx, box.y2 * fy, target)


def bounds(space: CoordSpace, frame: ImageFrame | None) -> tuple[float, float]:
    if space is CoordSpace.NORM1000:
        return NORM_SCALE, NORM_SCALE
    if frame is None:
        raise InvalidInputError(f"boxes in {space.value!r} space need an ImageFrame to know the image size")
    return frame.size(space)


def clip_box(box: Box, width: float, height: float) -> Box:
    """Clamp a box to ``[0, width] x [0, height]`` in its own space."""
    return Box(
        min(max(box.x1, 0.0), width),
        min(max(box.y1, 0.0), height),
        min(max(box.x2, 0.0), width),
        min(max(box.y2, 0.0), height),
        box.space,
    )


def is_valid_box(box: Box, width: float, height: float) -> bool:
    """True if the box has positive area and lies inside ``[0, width] x [0, height]``."""
    return 0 <= box.x1 < box.x2 <= width and 0 <= box.y1 < box.y2 <= height


def area(box: Box) -> float:
    return box.width * box.height


def iou(a: Box, b: Box) -> float:
    """Intersection over union of two boxes in the same space (pixel convention, no +1).

    >>> iou(Box(0, 0, 10, 10), Box(5, 0, 15, 10))
    0.3333333333333333
    """
    if a.space is not b.space:
        raise InvalidInputError(f"IoU of boxes in different spaces ({a.space.value} vs {b.space.value})")
    iw = min(a.x2, b.x2) - max(a.x1, b.x1)
    ih = min(a.y2, b.y2) - max(a.y1, b.y1)
    if iw <= 0 or ih <= 0:
        return 0.0
    inter = iw * ih
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def max_pairwise_iou(boxes: Sequence[Box]) -> float:
    """Largest IoU between any two distinct boxes (0 for fewer than two)."""
    best = 0.0
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            best = max(best, iou(boxes[i], boxes[j]))
    return best


# --- VRAG-RL crop and zoom frames ------------------------------------------------------------

CropMode = Literal["paper", "upstream"]

VRAG_MAX_PIXELS = 512 * 28 * 28  # rollout resize bounds of the released VRAG-RL agent
VRAG_MIN_PIXELS = 256 * 28 * 28
VALIDATION_PAD = 28  # displayed-frame padding added around a box before mapping (upstream)


def process_image_size(
    width: int, height: int, max_pixels: int = VRAG_MAX_PIXELS, min_pixels: int = VRAG_MIN_PIXELS
) -> tuple[int, int]:
    """Displayed size ``(w, h)`` of a ``width x height`` image after VRAG's ``process_image``.

    Shrink by sqrt(max / (w h)) when above ``max_pixels``, then grow by sqrt(min / (w h)) when
    below ``min_pixels``; both sides truncated with ``int()`` as upstream.

    >>> process_image_size(1654, 2339)
    (532, 753)
    """
    if width < 1 or height < 1:
        raise InvalidInputError(f"image size must be positive, got {width}x{height}")
    w, h = width, height
    if w * h > max_pixels:
        factor = math.sqrt(max_pixels / (w * h))
        w, h = int(w * factor), int(h * factor)
    if w * h < min_pixels:
        factor = math.sqrt(min_pixels / (w * h))
        w, h = int(w * factor), int(h * factor)
    return w, h


@dataclass(frozen=True)
class Displayed:
    """An image shown to the policy: which page region it shows and at what size.

    ``region`` is ``(x0, y0, x1, y1)`` in raw page pixels (the whole page for a retrieved
    page, the cropped region for a zoom); ``size`` is the displayed ``(w, h)``.
    """

    page_id: str
    image_path: str
    page_size: tuple[int, int]  # raw page (w, h)
    region: tuple[int, int, int, int]
    size: tuple[int, int]

    @classmethod
    def page(
        cls,
        page_id: str,
        image_path: str,
        page_size: tuple[int, int],
        max_pixels: int = VRAG_MAX_PIXELS,
        min_pixels: int = VRAG_MIN_PIXELS,
    ) -> Displayed:
        w, h = page_size
        return cls(
            page_id, image_path, page_size, (0, 0, w, h), process_image_size(w, h, max_pixels, min_pixels)
        )


def map_crop_upstream(
    bbox: Sequence[float],
    width: int,
    height: int,
    raw_width: int,
    raw_height: int,
    is_validation: bool = False,
) -> list[int]:
    """The released mapping, line for line: pad (validation only), scale, ``int()``, clamp.

    No ``x1 < x2`` check: an empty or inverted crop is left to the caller (upstream PIL raised).

    >>> map_crop_upstream([100, 100, 200, 200], 448, 632, 1654, 2339)
    [369, 370, 738, 740]
    """
    x1, y1, x2, y2 = bbox
    if is_validation:
        x1, y1, x2, y2 = x1 - VALIDATION_PAD, y1 - VALIDATION_PAD, x2 + VALIDATION_PAD, y2 + VALIDATION_PAD
    sx, sy = raw_width / width, raw_height / height
    mapped = [int(x1 * sx), int(y1 * sy), int(x2 * sx), int(y2 * sy)]
    return [
        max(0, min(mapped[0], raw_width)),
        max(0, min(mapped[1], raw_height)),
        max(0, min(mapped[2], raw_width)),
        max(0, min(mapped[3], raw_height)),
    ]


def map_crop(bbox: Sequence[float], shown: Displayed, pad: bool = False) -> tuple[int, int, int, int]:
    """Paper mode (VRAG-RL Eq. 2): map a box in ``shown``'s displayed frame to raw page pixels.

    Scaled by the region's size over the displayed size, offset by the region's origin,
    truncated like upstream, clamped to the region.

    >>> page = Displayed("p", "p.png", (1654, 2339), (0, 0, 1654, 2339), (448, 632))
    >>> map_crop([100, 100, 200, 200], page)
    (369, 370, 738, 740)
    """
    x1, y1, x2, y2 = (float(v) for v in bbox)
    if pad:
        x1, y1, x2, y2 = x1 - VALIDATION_PAD, y1 - VALIDATION_PAD, x2 + VALIDATION_PAD, y2 + VALIDATION_PAD
    rx0, ry0, rx1, ry1 = shown.region
    sx, sy = (rx1 - rx0) / shown.size[0], (ry1 - ry0) / shown.size[1]

    def cx(v: float) -> int:
        return max(rx0, min(rx0 + int(v * sx), rx1))

    def cy(v: float) -> int:
        return max(ry0, min(ry0 + int(v * sy), ry1))

    return cx(x1), cy(y1), cx(x2), cy(y2)


@dataclass(frozen=True)
class CropRule:
    """How a ``<bbox>`` on the last image shown becomes a region of a raw page, and which page."""

    name: str
    region: Callable[[Sequence[float], Displayed, Displayed, bool], tuple[int, int, int, int]]
    from_last_page: bool  # crops the last retrieved page (as released) rather than the image shown


def _region_paper(
    bbox: Sequence[float], shown: Displayed, last_page: Displayed, pad: bool
) -> tuple[int, int, int, int]:
    return map_crop(bbox, shown, pad)


def _region_upstream(
    bbox: Sequence[float], shown: Displayed, last_page: Displayed, pad: bool
) -> tuple[int, int, int, int]:
    w, h = last_page.page_size
    x1, y1, x2, y2 = map_crop_upstream(bbox, shown.size[0], shown.size[1], w, h, pad)
    return x1, y1, x2, y2


CROP_RULES: Registry[CropRule] = Registry("crop rule")
CROP_RULES.add("paper", CropRule("paper", _region_paper, from_last_page=False))
CROP_RULES.add("upstream", CropRule("upstream", _region_upstream, from_last_page=True))


def crop_displayed(
    bbox: Sequence[float], shown: Displayed, last_page: Displayed, mode: CropMode = "paper", pad: bool = False
) -> tuple[int, int, int, int]:
    """Raw page region of a ``<bbox>``: ``shown`` is the last image displayed, ``last_page`` the
    last retrieved page (``upstream`` crops that page at the scale of ``shown``; ``CROP_RULES``)."""
    return CROP_RULES.get(mode).region(bbox, shown, last_page, pad)


def convert_to_qwen25vl_format(
    bbox: Sequence[float], orig_height: int, orig_width: int, max_pixels: int = VRAG_MAX_PIXELS
) -> list[int]:
    """A box in original pixels -> the smart-resized frame VRAG's SFT data teaches.

    ``round`` is Python's banker's rounding, then each coordinate is clamped to the new side - 1.

    >>> convert_to_qwen25vl_format([100, 200, 800, 900], 2339, 1654)
    [32, 62, 257, 280]
    """
    new_h, new_w = smart_resize(orig_height, orig_width, max_pixels=max_pixels)
    x1, y1, x2, y2 = bbox
    out = [
        round(x1 * new_w / orig_width),
        round(y1 * new_h / orig_height),
        round(x2 * new_w / orig_width),
        round(y2 * new_h / orig_height),
    ]
    return [
        max(0, min(out[0], new_w - 1)),
        max(0, min(out[1], new_h - 1)),
        max(0, min(out[2], new_w - 1)),
        max(0, min(out[3], new_h - 1)),
    ]


def page_box_to_displayed(box: Box, shown: Displayed) -> list[int]:
    """A box in raw page pixels -> integer pixels of ``shown`` (a whole displayed page), rounded
    outwards so that ``map_crop`` of the result covers the box.

    >>> page = Displayed("p", "p.png", (1654, 2339), (0, 0, 1654, 2339), (448, 632))
    >>> page_box_to_displayed(Box(369, 370, 738, 740), page)
    [99, 99, 200, 200]
    """
    rx0, ry0, rx1, ry1 = shown.region
    sx, sy = shown.size[0] / (rx1 - rx0), shown.size[1] / (ry1 - ry0)
    return [
        int((box.x1 - rx0) * sx),
        int((box.y1 - ry0) * sy),
        int((box.x2 - rx0) * sx) + 1,
        int((box.y2 - ry0) * sy) + 1,
    ]
