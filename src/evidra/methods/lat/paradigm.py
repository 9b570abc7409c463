"""LAT's Chain-of-Evidence (CoE) output format (LAT §3.1, Eq. 1).

Every reasoning step that cites a document element ends with
``Bounding box: {"bbox_2d": [x1, y1, x2, y2], "Image_index": k}``; the answer repeats the box of
its evidence; an unanswerable question is answered "No answer". Boxes are absolute pixels of
the ORIGINAL page (the prompt states ``ImageSize: (w, h)`` of each page), page indices 1-based.

The LAT paper prints no prompt; the instruction text is the released one (``src/grpo.py``,
``SYSTEM_PROMPT_CORRECT_SINGLE`` / ``_MULTI``), laid out as the released training set-up does:
``Document Image k:`` + image + ``ImageSize: (w, h)`` per page, then the instruction and the
question (a missing "?" is appended, as upstream does). ``eval_layout=True`` gives the
evaluation script's ``Document Image: k`` label instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.core.types import Box, CoordSpace, ImagePart, Message, Page, Parsed, Sample, Step, TextPart
from evidra.paradigms.paradigm import PARADIGMS
from evidra.rewards.boxes import extract_tag, parse_lat_boxes

_RESTRICTIONS = (
    "[Restriction]:\n"
    "1. For each identified element (e.g., figures, tables, or factual text) during analysis, provide a "
    "bounding box and include its image index to highlight the visual evidence.\n"
    "2. The analysis and final answer are enclosed within <think> </think> and <answer> </answer> tags, "
    "respectively, i.e., <think> analysis with visual evidence. </think>\n<answer> the final answer and "
    "the corresponding bounding box as its source. </answer>\n"
    "3. Each bounding box must be formatted as:\n"
)
# LAT released prompts (src/grpo.py), verbatim (its "\\n" escape in restriction 2 is a newline).
COE_SINGLE_PROMPT = (
    "[Task Description]: \n"
    "Given a document image and a relevant question, you should first analysis the image to extract "
    "information relevant to the question then provide the final answer. Finally please locate source "
    "to the final answer via a bounding box with image index.\n"
    + _RESTRICTIONS
    + 'Bounding box: {"bbox_2d": [x1, y1, x2, y2], "Image_index": 1}'
)
COE_MULTI_PROMPT = (
    "[Task Description]: \n"
    "Given document images and a relevant question, you should first analysis the images to extract "
    "information relevant to the question then provide the final answer. Finally please locate source "
    "to the final answer via a bounding box with image index.\n"
    + _RESTRICTIONS
    + 'Bounding box: {"bbox_2d": [x1, y1, x2, y2], "Image_index": image_index_starting_from_1}'
)
NO_ANSWER = "No answer"
_LABEL = re.compile(r"bounding\s*box(?:es)?\s*:?\s*$", re.IGNORECASE)


def format_box(box: Box, page_index: int) -> str:
    """A LAT citation for ``box`` (page pixels) on the 0-based ``page_index``.

    >>> format_box(Box(1.4, 2, 30, 40), 0)
    'Bounding box: {"bbox_2d": [1, 2, 30, 40], "Image_index": 1}'
    """
    coords = ", ".join(str(round(v)) for v in box.as_tuple())
    return f'Bounding box: {{"bbox_2d": [{coords}], "Image_index": {page_index + 1}}}'


def question_text(question: str) -> str:
    """The question as upstream writes it: a trailing "?" is added when missing."""
    q = question.strip()
    return q if q.endswith("?") else q + "?"


def _structure_errors(text: str) -> list[str]:
    """Reward-hacking shapes the LAT format regex (Eq. 10) lets through or rejects silently."""
    errors = [f"<{tag}> repeated" for tag in ("think", "answer") if text.count(f"<{tag}>") > 1]
    think_at, answer_at = text.find("<think>"), text.find("<answer>")
    if think_at >= 0 and answer_at >= 0 and answer_at < think_at:
        errors.append("tags out of order: <answer> before <think>")
    return errors


def parse_coe(text: str) -> Parsed:
    """Steps (each with its page and box, page pixels), answer and answer box of a CoE output.

    Never raises: a missing tag, an unreadable box or a step without text is listed in
    ``errors``; steps keep their order. A truncated output (no ``</think>``) still yields the
    steps written so far (``extract_tag`` runs an unclosed block to the end).
    """
    errors: list[str] = []
    think = extract_tag(text, "think")
    answer_raw = extract_tag(text, "answer")
    if think is None:
        errors.append("missing <think>")
    if answer_raw is None:
        errors.append("missing <answer>")
    errors += _structure_errors(text)
    steps: list[Step] = []
    previous = 0
    for pb in parse_lat_boxes(think or "", CoordSpace.PAGE):
        segment = _LABEL.sub("", (think or "")[previous : pb.start].rstrip()).strip()
        previous = pb.end
        if pb.error is not None:
            errors.append(f"step {len(steps) + 1}: {pb.error}")
        steps.append(Step(segment, pb.page_index, pb.box))
    answer, answer_box, answer_page = None, None, None
    if answer_raw is not None:
        boxes = parse_lat_boxes(answer_raw, CoordSpace.PAGE)
        cut = boxes[0].start if boxes else len(answer_raw)
        answer = _LABEL.sub("", answer_raw[:cut].rstrip()).strip().rstrip(".").strip()
        if boxes:
            answer_box, answer_page = boxes[0].box, boxes[0].page_index
            if boxes[0].error is not None:
                errors.append(f"answer box: {boxes[0].error}")
        elif NO_ANSWER.lower() not in answer.lower():
            errors.append("answer cites no box")
    fields = {"think": think} if think is not None else {}
    return Parsed(
        text=text,
        answer=answer,
        steps=tuple(steps),
        answer_box=answer_box,
        answer_page=answer_page,
        fields=fields,
        errors=tuple(errors),
    )


@dataclass(frozen=True)
class ChainOfEvidence:
    """LAT CoE prompt + parser. ``multi_image=None`` picks the multi-image (VISA candidates)
    prompt when more than one page is shown, the single-image one otherwise."""

    name: str = "coe"
    multi_image: bool | None = None
    eval_layout: bool = False  # evaluation.py labels pages "Document Image: k"

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]:
        multi = self.multi_image if self.multi_image is not None else len(pages) > 1
        parts: list[ImagePart | TextPart] = []
        for k, page in enumerate(pages, 1):
            label = f"Document Image: {k}\n" if self.eval_layout else f"Document Image {k}:\n"
            parts.append(TextPart(label))
            parts.append(ImagePart(page.image_path, page_id=page.id))
            parts.append(TextPart(f"ImageSize: ({page.width}, {page.height})\n\n"))
        prompt = COE_MULTI_PROMPT if multi else COE_SINGLE_PROMPT
        parts.append(TextPart(prompt + "\n\nQuestion: "))
        parts.append(TextPart(question_text(sample.question)))
        return [Message("user", tuple(parts))]

    def parse(self, text: str) -> Parsed:
        return parse_coe(text)

    def reward_names(self) -> tuple[str, ...]:
        return ("accuracy", "step", "ground", "format")  # LAT Eqs. 3, 8, 9, 10


def coe_oracle_text(sample: Sample) -> str:
    """A correct CoE answer built from the gold evidence, for SFT cold start (LAT §3.2).

    One step reads the evidence region (``Sample.evidence_box`` when it lies on the gold page),
    the next the answer itself; the answer cites the gold box. Unanswerable -> "No answer".
    An answerable sample without a gold box has no correct chain to write: ``InvalidInputError``.
    """
    if sample.answerable and not sample.gold_boxes:
        raise InvalidInputError(f"sample {sample.id!r}: a CoE oracle needs the gold answer box")
    if not sample.answerable:
        think = "None of the document images contains information that answers the question."
        return f"<think>{think}</think>\n<answer>{NO_ANSWER}</answer>"
    gold = sample.gold_boxes[0]
    index = sample.page_index(gold.page_id)
    evidence = sample.evidence_box
    steps = []
    text = sample.gold_evidence.get(gold.page_id, "")
    if evidence is not None and evidence.page_id == gold.page_id and text:
        steps.append(f"The document states: {text.rstrip('.')}. {format_box(evidence.box, index)}")
    answer = sample.answers[0] if sample.answers else ""
    steps.append(f"So the answer is {answer}. {format_box(gold.box, index)}")
    return f"<think>{' '.join(steps)}</think>\n<answer>{answer}\n{format_box(gold.box, index)}</answer>"


PARADIGMS.add("coe", ChainOfEvidence)
PARADIGMS.add("coe.single", lambda: ChainOfEvidence(name="coe.single", multi_image=False))
PARADIGMS.add("coe.multi", lambda: ChainOfEvidence(name="coe.multi", multi_image=True))
