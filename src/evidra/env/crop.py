"""Crop-and-zoom geometry of VRAG-RL's visual perception action (VRAG-RL §2.2, Eq. 2).

The policy writes ``<bbox>[x1, y1, x2, y2]</bbox>`` in the pixel frame of an image *as it was
displayed* in its context: a retrieved page after VRAG's ``process_image`` resize, or an earlier
crop after the same resize. The box is mapped back to raw page pixels and that region of the
raw page is cropped and inserted as the next observation.

Two modes:

* ``paper`` (default): the box is read in the frame of the image it refers to, the last image
  displayed, and mapped through that image's own region of the page. Zooming into a crop
  therefore zooms further into the same region.
* ``upstream``: the released rollout (``vrag_agent/generation.py``) scales by the size of the
  last image in context but crops the last *retrieved* page from its origin, which is wrong
  once the last image is itself a crop (the released code; recorded cases ``vrag_map_crop``).

``convert_to_qwen25vl_format`` is the rule of VRAG's SFT data script: boxes in original
pixels become boxes in the smart-resized frame (conformance
``vrag_convert_to_qwen25vl_format``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from evidra.errors import InvalidInputError
from evidra.geometry import smart_resize

CropMode = Literal["paper", "upstream"]

VRAG_MAX_PIXELS = 512 * 28 * 28  # rollout resize bounds of the released VRAG-RL agent
VRAG_MIN_PIXELS = 256 * 28 * 28
VALIDATION_PAD = 28  # displayed-frame padding added around a box before mapping (upstream)


def process_image_size(width: int, height: int, max_pixels: int = VRAG_MAX_PIXELS,
                       min_pixels: int = VRAG_MIN_PIXELS) -> tuple[int, int]:  # fmt: skip
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
    def page(cls, page_id: str, image_path: str, page_size: tuple[int, int],
             max_pixels: int = VRAG_MAX_PIXELS, min_pixels: int = VRAG_MIN_PIXELS) -> Displayed:  # fmt: skip
        w, h = page_size
        return cls(
            page_id, image_path, page_size, (0, 0, w, h), process_image_size(w, h, max_pixels, min_pixels)
        )


def map_crop_upstream(bbox: Sequence[float], width: int, height: int, raw_width: int, raw_height: int,
                      is_validation: bool = False) -> list[int]:  # fmt: skip
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


def crop_displayed(bbox: Sequence[float], shown: Displayed, last_page: Displayed, mode: CropMode = "paper",
                   pad: bool = False) -> tuple[int, int, int, int]:  # fmt: skip
    """Raw page region of a ``<bbox>``: ``shown`` is the last image displayed, ``last_page`` the
    last retrieved page (upstream crops that page at the scale of ``shown``)."""
    if mode == "upstream":
        w, h = last_page.page_size
        x1, y1, x2, y2 = map_crop_upstream(bbox, shown.size[0], shown.size[1], w, h, pad)
        return x1, y1, x2, y2
    return map_crop(bbox, shown, pad)


def convert_to_qwen25vl_format(bbox: Sequence[float], orig_height: int, orig_width: int,
                               max_pixels: int = VRAG_MAX_PIXELS) -> list[int]:  # fmt: skip
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
