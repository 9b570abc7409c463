"""VRAG-RL's distillation filter (App. D): a large model writes the trajectory; each region it selects
(``<bbox>`` action) is re-located by a grounding model (``annotator``, the paper used Qwen2.5-VL-72B)
guided by the teacher's thought, and the trajectory is kept if it answers correctly (ANLS >= 0.5
against the gold answers)."""

from __future__ import annotations

import re

from evidra.core.types import ImagePart, Message, Sample, TextPart
from evidra.data.construction.distill import DistillContext, Verdict
from evidra.metrics.anls import anls

_BBOX = re.compile(r"<bbox>(.*?)</bbox>", re.DOTALL)
_NUMBERS = re.compile(r"-?\d+(?:\.\d+)?")
GROUNDING_PROMPT = (
    "The reasoning below needs a region of this image. Output only its bounding box as a JSON list "
    "[x1, y1, x2, y2] in pixels.\nReasoning: {thought}"
)


def _reground(sample: Sample, text: str, ctx: DistillContext) -> tuple[str, list[dict[str, str | None]]]:
    """Replace each ``<bbox>`` of the trajectory with the grounding model's box for it."""
    if ctx.annotator is None or not sample.pages:
        return text, []
    changes: list[dict[str, str | None]] = []
    annotator = ctx.annotator

    def swap(m: re.Match[str]) -> str:
        thought = text[: m.start()].rsplit("<think>", 1)[-1].split("</think>")[0].strip()
        page = sample.pages[0]  # VRAG-RL crops from the image just observed; one page in this loop
        msg = Message(
            "user",
            (ImagePart(page.image_path, page_id=page.id), TextPart(GROUNDING_PROMPT.format(thought=thought))),
        )
        reply = annotator.complete([msg], max_tokens=64).text
        numbers = _NUMBERS.findall(reply)
        if len(numbers) < 4:
            changes.append({"original": m.group(1), "regrounded": None})
            return m.group(0)
        box = "[" + ", ".join(numbers[:4]) + "]"
        changes.append({"original": m.group(1).strip(), "regrounded": box})
        return f"<bbox>{box}</bbox>"

    return _BBOX.sub(swap, text), changes


def vragrl_filter(sample: Sample, text: str, ctx: DistillContext) -> Verdict:
    text, changes = _reground(sample, text, ctx)
    answer = ctx.paradigm.parse(text).answer
    if answer is None:  # multi-action outputs: the answer block anywhere in the trajectory
        found = re.search(r"<answer>(.*?)</answer>", text, re.DOTALL)
        answer = found.group(1).strip() if found else ""
    ok = bool(sample.answers) and anls(answer, sample.answers) >= 0.5
    return Verdict(ok, text, {"regrounded": changes})
