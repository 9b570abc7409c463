"""Which box convention a model writes, and how its boxes land back on page pixels.

Every VLM family writes boxes its own way: Qwen2.5-VL in absolute pixels of the image after its
``smart_resize``, Qwen2-VL and Qwen3-VL (and InternVL, MiniCPM-V, GLM-4.xV) on a 0-1000 grid,
Gemini as ``[ymin, xmin, ymax, xmax]`` on 0-1000, Molmo in percent, LLaVA in 0-1 fractions, and a
prompt that states the page size (LAT's ``ImageSize: (w, h)``) in page pixels. A ``BoxFormat``
records one convention; ``BOX_FORMATS`` holds them by name (``--box-format NAME``) and
``box_format_for`` picks one from what evidra knows about a model: an override, its
``config.json`` (``model_type`` / ``architectures``), or only its name, as an OpenAI-compatible
server reports it (``Qwen/Qwen2.5-VL-7B-Instruct``, Ollama's ``qwen2.5vl:7b``, ``gemini-2.0-flash``).

The scaling itself is ``evidra.core.geometry.convert_box``; this module only says which frame the
numbers are in. A box that cannot be placed (wrong arity, not finite, inverted, outside the frame)
comes back as a ``MappedBox`` with ``error`` set: model output is data, never an exception.

>>> fmt = box_format_for("gemini-2.0-flash", None, None)
>>> fmt.name, [round(v) for v in fmt.to_page([257, 242, 282, 423], (4960, 7016)).box.as_tuple()]
('gemini', [1200, 1803, 2098, 1979])
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from numbers import Real
from typing import Literal

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import (
    NORM_SCALE,
    VISION_SPECS,
    Displayed,
    ImageFrame,
    VisionSpec,
    clip_box,
    convert_box,
    smart_resize,
)
from evidra.core.registry import Registry
from evidra.core.types import Box, CoordSpace

logger = logging.getLogger(__name__)

Order = Literal["xyxy", "yxyx"]
SLACK = 0.01  # a coordinate may overshoot its frame by 1% of the frame's side (then it is clipped)
DEFAULT_FORMAT = "norm1000"
# Images sent to a model's server (``evidra.models.endpoint``): a family's resize is capped at
# Qwen2/2.5-VL's released maximum, whose worst-case PNG (3 bytes a pixel) stays under the 64 MiB
# of one data URL once in base64; a family without a known resize gets its long side cut to the
# 2048 pixels OpenAI's vision input scales every image to fit.
MAX_SENT_PIXELS = 28 * 28 * 16384
MAX_SENT_SIDE = 2048


@dataclass(frozen=True)
class MappedBox:
    """A model's box on the page (page pixels, clipped to the page), or why it has none."""

    box: Box | None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.box is not None and self.error is None


@dataclass(frozen=True)
class BoxFormat:
    """One box convention: the frame a model's four numbers are in, and their order.

    ``space`` is ``NORM1000`` for every normalised grid (the numbers are first rescaled from
    0..``unit`` to 0..1000), ``MODEL`` for absolute pixels of the image the model saw (after
    ``resize`` when the family resizes; the image as sent when ``resize`` is None), ``PAGE`` for
    pixels of the original page.
    """

    name: str
    writes: str  # what the model writes, in words (docs and logs)
    space: CoordSpace
    source: str  # where the convention is documented
    unit: float = NORM_SCALE  # full scale of a normalised grid (1000, 100, 1)
    order: Order = "xyxy"
    resize: VisionSpec | None = None  # the family's own resize (only MODEL pixels depend on it)

    def seen_size(self, page_size: tuple[int, int]) -> tuple[int, int]:
        """``(w, h)`` at which evidra sends an image of ``page_size`` to a model of this family, which
        is the image the model sees: the family's own resize (sides multiples of its factor within
        its pixel bounds, at most ``MAX_SENT_PIXELS``), so that its server's processor leaves it as
        it is; without one, the long side cut to ``MAX_SENT_SIDE``. ``InvalidInputError`` for an
        image too narrow for the family's resize (aspect ratio above 200).

        >>> BOX_FORMATS.get("qwen2.5-vl").seen_size((1275, 1650))
        (1288, 1652)
        >>> BOX_FORMATS.get("norm1").seen_size((2480, 3508))
        (1448, 2048)
        """
        width, height = page_size
        if self.resize is None:
            return capped_size(page_size, MAX_SENT_SIDE)
        spec = self.resize
        h, w = smart_resize(
            height, width, spec.factor, spec.min_pixels, min(spec.max_pixels, MAX_SENT_PIXELS)
        )
        return w, h

    def sent_size(self, size: tuple[int, int]) -> tuple[int, int]:
        """``seen_size``, or the long side cut to ``MAX_SENT_SIDE`` for an image the family's resize
        refuses (the server then decides): the size every image goes to an endpoint at."""
        try:
            return self.seen_size(size)
        except InvalidInputError:
            return capped_size(size, MAX_SENT_SIDE)

    def to_page(
        self, values: Sequence[object], page_size: tuple[int, int], seen_size: tuple[int, int] | None = None
    ) -> MappedBox:
        """The box ``values`` (as the model wrote them) in pixels of a page of ``page_size``.

        ``seen_size`` is the ``(w, h)`` of the image the model saw, when the caller knows it (an
        in-process model's processor, an image resized before sending); otherwise the family's
        resize gives it. Never raises on ``values``.
        """
        _check_size(page_size, "page size")
        numbers, error = _four_numbers(values)
        if numbers is None:
            return MappedBox(None, error)
        x1, y1, x2, y2 = numbers if self.order == "xyxy" else (numbers[1], numbers[0], numbers[3], numbers[2])
        if x2 < x1 or y2 < y1:
            return MappedBox(None, f"inverted box ({x1:g}, {y1:g}, {x2:g}, {y2:g}) in {self.name}")
        if seen_size is None and self.space is not CoordSpace.MODEL:
            seen_size = page_size  # a grid or page pixels: the size sent does not matter
        elif seen_size is None:
            try:  # a page too narrow for the family's resize is a page this model cannot cite
                seen_size = self.seen_size(page_size)
            except InvalidInputError as exc:
                return MappedBox(None, str(exc))
        _check_size(seen_size, "seen size")
        frame = ImageFrame(page_size[0], page_size[1], seen_size[0], seen_size[1])
        return self._place((x1, y1, x2, y2), frame)

    def _place(self, xyxy: tuple[float, float, float, float], frame: ImageFrame) -> MappedBox:
        scale = NORM_SCALE / self.unit if self.space is CoordSpace.NORM1000 else 1.0
        x1, y1, x2, y2 = (v * scale for v in xyxy)
        width, height = frame.size(self.space)
        if (
            x1 < -SLACK * width
            or y1 < -SLACK * height
            or x2 > width * (1 + SLACK)
            or y2 > height * (1 + SLACK)
        ):
            return MappedBox(None, f"box {_show(xyxy)} lies outside the {_extent(self, width, height)} frame")
        box = convert_box(Box(x1, y1, x2, y2, self.space), CoordSpace.PAGE, frame)
        box = clip_box(box, frame.page_width, frame.page_height)
        if box.width <= 0 or box.height <= 0:
            return MappedBox(None, f"box {_show(xyxy)} has no area on the page")
        return MappedBox(box)


def _check_size(size: tuple[int, int], what: str) -> None:
    if len(size) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size):
        raise InvalidInputError(f"{what} must be two positive integers (w, h), got {size!r}")


def _four_numbers(values: Sequence[object]) -> tuple[tuple[float, float, float, float] | None, str | None]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        return None, f"box must be a list of 4 numbers, got {type(values).__name__}"
    if len(values) != 4:
        return None, f"expected 4 coordinates, got {len(values)}"
    numbers: list[float] = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, Real):
            return None, "coordinates are not finite numbers"
        try:
            number = float(v)  # an int past float's range overflows
        except OverflowError:
            return None, "coordinates are not finite numbers"
        if not math.isfinite(number):
            return None, "coordinates are not finite numbers"
        numbers.append(number)
    return (numbers[0], numbers[1], numbers[2], numbers[3]), None


def _show(xyxy: tuple[float, float, float, float]) -> str:
    return "(" + ", ".join(f"{v:.6g}" for v in xyxy) + ")"


def _extent(fmt: BoxFormat, width: float, height: float) -> str:
    if fmt.space is CoordSpace.NORM1000:
        return f"0..{fmt.unit:g} ({fmt.name})"
    return f"{width:g}x{height:g} px ({fmt.name})"


def capped_size(size: tuple[int, int], side: int) -> tuple[int, int]:
    """``size`` (w, h) scaled down so that its long side is at most ``side`` (unchanged when it is).

    >>> capped_size((2480, 3508), 2048), capped_size((800, 600), 2048)
    ((1448, 2048), (800, 600))
    """
    width, height = size
    longest = max(width, height)
    if longest <= side:
        return width, height
    return max(1, round(width * side / longest)), max(1, round(height * side / longest))


def on_shown(fmt: BoxFormat, values: Sequence[object], shown: Displayed) -> MappedBox:
    """A box the model wrote in convention ``fmt`` on the image ``shown`` (a page, or a crop of one,
    displayed at ``shown.size``), in pixels of that image as displayed: the frame in which the search
    environment maps a crop (``evidra.core.geometry.crop_displayed``). Never raises on ``values``.

    A grid or pixel convention is read against the displayed image (sent at ``fmt.seen_size`` of
    it); ``page`` pixels are coordinates on the raw page, read within the region ``shown`` covers.

    >>> shown = Displayed("p", "p.png", (1000, 2000), (0, 0, 1000, 2000), (448, 896))
    >>> mapped = on_shown(BOX_FORMATS.get("qwen3-vl"), [100, 100, 300, 200], shown)
    >>> [round(v, 1) for v in mapped.box.as_tuple()]
    [44.8, 89.6, 134.4, 179.2]
    """
    if fmt.space is not CoordSpace.PAGE:
        return fmt.to_page(values, shown.size)
    numbers, error = _four_numbers(values)
    if numbers is None:
        return MappedBox(None, error)
    rx0, ry0, rx1, ry1 = shown.region
    x1, y1, x2, y2 = numbers
    mapped = fmt.to_page((x1 - rx0, y1 - ry0, x2 - rx0, y2 - ry0), (rx1 - rx0, ry1 - ry0))
    if mapped.box is None:
        return mapped
    sx, sy = shown.size[0] / (rx1 - rx0), shown.size[1] / (ry1 - ry0)
    box = mapped.box
    return MappedBox(Box(box.x1 * sx, box.y1 * sy, box.x2 * sx, box.y2 * sy, CoordSpace.MODEL))


BOX_FORMATS: Registry[BoxFormat] = Registry("box format")


def _register(fmt: BoxFormat) -> BoxFormat:
    BOX_FORMATS.add(fmt.name, fmt)
    return fmt


_register(
    BoxFormat(
        "qwen2.5-vl",
        "absolute pixels [x1, y1, x2, y2] of the image after smart_resize (factor 28)",
        CoordSpace.MODEL,
        "Qwen2.5-VL technical report (absolute coordinates); VRAG-RL's SFT data",
        resize=VISION_SPECS["qwen2_5_vl"],
    )
)
_register(
    BoxFormat(
        "qwen2-vl",
        "[x1, y1, x2, y2] on a 0-1000 grid (<|box_start|>(x1,y1),(x2,y2)<|box_end|>)",
        CoordSpace.NORM1000,
        "Qwen2-VL model card and technical report",
        resize=VISION_SPECS["qwen2_vl"],
    )
)
_register(
    BoxFormat(
        "qwen3-vl",
        "[x1, y1, x2, y2] on a 0-1000 grid (resize factor 32, which the grid ignores)",
        CoordSpace.NORM1000,
        "Qwen3-VL technical report (relative 0-1000 coordinates)",
        resize=VISION_SPECS["qwen3_vl"],
    )
)
_register(
    BoxFormat(
        "norm1000",
        "[x1, y1, x2, y2] on a 0-1000 grid of the image",
        CoordSpace.NORM1000,
        "InternVL (evaluate_grounding.py divides by 1000), MiniCPM-V, GLM-4.1V/4.5V",
    )
)
_register(
    BoxFormat(
        "gemini",
        "box_2d [ymin, xmin, ymax, xmax] on a 0-1000 grid",
        CoordSpace.NORM1000,
        "Gemini API / Vertex AI bounding-box detection docs",
        order="yxyx",
    )
)
_register(
    BoxFormat(
        "molmo",
        "[x1, y1, x2, y2] in percent (0-100) of the image",
        CoordSpace.NORM1000,
        "Molmo points are percentages (<point x= y=>); boxes assumed alike (chosen)",
        unit=100.0,
    )
)
_register(
    BoxFormat(
        "norm1",
        "[x1, y1, x2, y2] as fractions (0-1) of the image",
        CoordSpace.NORM1000,
        "LLaVA-1.5 grounding data (fractions of the image; chosen for LLaVA)",
        unit=1.0,
    )
)
_register(
    BoxFormat(
        "pixels",
        "absolute pixels [x1, y1, x2, y2] of the image as sent",
        CoordSpace.MODEL,
        "generic: models that read the image at the size they receive it",
    )
)
_register(
    BoxFormat(
        "page",
        "absolute pixels [x1, y1, x2, y2] of the original page (the prompt states its size)",
        CoordSpace.PAGE,
        "LAT Chain-of-Evidence prompt (ImageSize: (w, h) per page)",
    )
)


@dataclass(frozen=True)
class Family:
    """A model family recognised by name: a pattern over the squashed name and its box format."""

    label: str
    pattern: re.Pattern[str]
    format: str


# Checked in order on names lower-cased with every non-alphanumeric removed ("Qwen2.5-VL-7B" ->
# "qwen25vl7b", "Qwen2_5_VLForConditionalGeneration" -> "qwen25vlforconditionalgeneration").
FAMILIES: tuple[Family, ...] = (
    Family("Qwen2.5-VL", re.compile(r"qwen25vl"), "qwen2.5-vl"),
    Family("Qwen2-VL", re.compile(r"qwen2vl"), "qwen2-vl"),
    Family("Qwen3-VL", re.compile(r"qwen3vl"), "qwen3-vl"),
    Family("Gemini", re.compile(r"gemini"), "gemini"),
    Family("InternVL", re.compile(r"internvl"), "norm1000"),
    Family("MiniCPM-V", re.compile(r"minicpm[vo]"), "norm1000"),
    Family("GLM-4.xV", re.compile(r"glm4\d*v"), "norm1000"),
    Family("Molmo", re.compile(r"molmo(?!2)"), "molmo"),
    Family("LLaVA", re.compile(r"llava"), "norm1"),
)


def squash(name: str) -> str:
    """A model name reduced to lower-case letters and digits, as ``FAMILIES`` patterns read it.

    >>> squash("Qwen/Qwen2.5-VL-7B-Instruct"), squash("qwen2.5vl:7b")
    ('qwenqwen25vl7binstruct', 'qwen25vl7b')
    """
    return re.sub(r"[^a-z0-9]", "", name.lower())


def family_of(name: str) -> Family | None:
    """The first family whose pattern occurs in ``name`` (squashed), or None."""
    key = squash(name)
    return next((f for f in FAMILIES if f.pattern.search(key)), None)


def _config_names(config: Mapping[str, object] | None) -> list[str]:
    """``model_type`` then each of ``architectures``; values that are not strings are skipped."""
    if not isinstance(config, Mapping):
        return []
    names = [config.get("model_type")]
    archs = config.get("architectures")
    if isinstance(archs, Sequence) and not isinstance(archs, (str, bytes)):
        names += list(archs)
    return [n for n in names if isinstance(n, str)]


def box_format_for(
    model_name: str | None, config: Mapping[str, object] | None, override: str | None
) -> BoxFormat:
    """The box convention of a model: ``override`` (``--box-format NAME``) wins, then the
    checkpoint's ``config.json``, then the model's name; else ``norm1000`` with a logged note.

    An unknown ``override`` is a ``RegistryError`` that names the close matches.

    >>> box_format_for("qwen2.5vl:7b", None, None).name
    'qwen2.5-vl'
    >>> box_format_for("Qwen/Qwen2.5-VL-7B-Instruct", None, "Page").name
    'page'
    """
    if override is not None:
        return BOX_FORMATS.get(override.strip().lower())
    for name in [*_config_names(config), *([model_name] if isinstance(model_name, str) else [])]:
        family = family_of(name)
        if family is not None:
            logger.debug("model %r reads as %s: box format %s", name, family.label, family.format)
            return BOX_FORMATS.get(family.format)
    logger.warning(
        "no box convention is known for model %r; reading its boxes as %s (0-1000 grid, the most common "
        "one); pass --box-format NAME if it writes another (%s)",
        model_name,
        DEFAULT_FORMAT,
        ", ".join(BOX_FORMATS.names()),
    )
    return BOX_FORMATS.get(DEFAULT_FORMAT)
