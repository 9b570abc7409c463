"""CAVE's zoom environment: interleaved zoom-in on one image within a round limit (CAVE §3.1).

Each round the policy either calls the zoom tool with a box in original-image pixels or
answers. A valid zoom returns the cropped region, enlarged to at least the display minimum,
inside ``<tool_response>`` as a user turn; it records the crop's area ratio (the ``rho_t``
of the adaptive-focus credit, CAVE §3.2.3). Invalid calls get an explanatory message and are
counted; the episode ends at the answer or after ``max_rounds`` rounds (CAVE App. D.1 limits
each rollout's rounds). With ``box_format`` set (an evaluation sets the served model's family's
convention, ``evidra.core.box_formats``) a zoom box is read by it instead of as original pixels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Unpack

from evidra.core.box_formats import BoxFormat
from evidra.core.geometry import VRAG_MAX_PIXELS, VRAG_MIN_PIXELS, process_image_size
from evidra.core.types import Box, ImagePart, Message, Page, Parsed, Sample, TextPart
from evidra.env.environment import ENVIRONMENTS, StepFields, StepInfo, StepResult
from evidra.env.search import resized, too_thin
from evidra.paradigms.paradigm import Paradigm

INVALID_MESSAGE = (
    "Your previous action is invalid: {reason}. Think inside <think> and </think>, then either call "
    'the tool with <tool_call>{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": [x1, y1, x2, '
    "y2]}}}}</tool_call> or give the final answer inside <answer> and </answer>."
)


@dataclass
class ZoomEnv:
    """One zoom episode over ``sample.pages[0]``: the policy zooms into regions of the page, then
    answers. ``paradigm`` reads its actions (CAVE's ``ZoomAgent``, ``evidra.methods.cave.paradigm``)."""

    paradigm: Paradigm
    max_rounds: int = 4
    max_pixels: int = VRAG_MAX_PIXELS
    min_pixels: int = VRAG_MIN_PIXELS
    stop: tuple[str, ...] = ("</tool_call>", "</answer>")
    # the convention a zoom box is written in (``evidra.core.box_formats``); None: pixels of the
    # original image, as CAVE's prompt asks and evidra's trained checkpoints write
    box_format: BoxFormat | None = None
    rounds: int = field(default=0, init=False)
    invalid: int = field(default=0, init=False)
    zooms: list[tuple[int, int, int, int]] = field(default_factory=list, init=False)
    _page: Page | None = field(default=None, init=False, repr=False)
    _parsed: Parsed | None = field(default=None, init=False, repr=False)

    def reset(self, sample: Sample) -> list[Message]:
        self.rounds, self.invalid, self.zooms = 0, 0, []
        self._page = sample.pages[0] if sample.pages else None
        return self.paradigm.build_messages(sample, sample.pages[:1])

    def step(self, text: str) -> StepResult:
        self.rounds += 1
        parsed = self._parsed = self.paradigm.parse(text)
        action = parsed.action
        if action is not None and action.name == "answer":
            return self._result((), True, action="answer", answer=parsed.answer)
        if self.rounds >= self.max_rounds:
            return self._result((), True, action=action.name if action else "none", turn_limit=True)
        if action is None or action.box is None or self._page is None:
            reason = next((e for e in parsed.errors if "think" not in e), "no valid action")
            return self._invalid(reason)
        page = self._page
        region = self._region(action.box, page)
        if isinstance(region, str):
            return self._invalid(region)
        x1, y1, x2, y2 = region
        size = process_image_size(x2 - x1, y2 - y1, self.max_pixels, self.min_pixels)
        if (thin := too_thin(action.box.as_tuple(), size)) is not None:
            return self._invalid(thin)
        crop = resized(page.open_image().crop((x1, y1, x2, y2)), size)
        self.zooms.append((x1, y1, x2, y2))
        ratio = (x2 - x1) * (y2 - y1) / float(page.width * page.height)
        obs = Message(
            "user",
            (TextPart("<tool_response>"), ImagePart(crop, page_id=page.id), TextPart("</tool_response>")),
        )
        return self._result(
            (obs,), False, action="zoom", page_id=page.id, crop=(x1, y1, x2, y2), area_ratio=ratio
        )

    def _region(self, box: Box, page: Page) -> tuple[int, int, int, int] | str:
        """The page region (whole pixels) of a zoom box, or why there is none: the box is page
        pixels unless ``box_format`` names the model's convention."""
        values = box.as_tuple()
        if self.box_format is not None:
            mapped = self.box_format.to_page(values, (page.width, page.height))
            if mapped.box is None:
                return f"the box {list(values)} cannot be placed on the image: {mapped.error}"
            box = mapped.box
        x1, y1 = max(0, int(box.x1)), max(0, int(box.y1))
        x2, y2 = min(page.width, int(box.x2)), min(page.height, int(box.y2))
        if x2 <= x1 or y2 <= y1:
            return f"the box {list(values)} lies outside the {page.width}x{page.height} image"
        return x1, y1, x2, y2

    def _invalid(self, reason: str) -> StepResult:
        self.invalid += 1
        reply = Message.text("user", INVALID_MESSAGE.format(reason=reason))
        return self._result((reply,), False, action="invalid", invalid=True, reason=reason)

    def _result(self, obs: tuple[Message, ...], done: bool, **info: Unpack[StepFields]) -> StepResult:
        info_ = StepInfo(**info, invalid_count=self.invalid, turn=self.rounds)
        return StepResult(obs, done, info_, parsed=self._parsed)


ENVIRONMENTS.add("zoom", ZoomEnv)
