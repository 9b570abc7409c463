"""The demo's report: a summary (model, training, counts, charts) above one card per question.

After training the cards come in two sections: held-out questions (documents the model never
trained on, answered before training, after SFT and after RL), then the training questions,
which a tiny model learns by heart. Each card shows the question, the gold answer and, side by
side, each model's answer with the boxes it cited drawn on the page beside the gold boxes (a
legend names every colour; a click enlarges a page). Page thumbnails are embedded, full-size
pages linked from the report's own ``images/`` folder and charts embedded as PNG, so the folder
can be moved or zipped whole.
The summary comes from ``evidra/templates/demo_summary.html.j2``, the cards from the viewer's
template; both escape every text.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from evidra.core.errors import MissingDependencyError
from evidra.core.templating import render
from evidra.core.types import Box, Page, Parsed, Sample

if TYPE_CHECKING:
    from evidra.eval.viewer import ViewerBox, ViewerRecord

GOLD = "#16a34a"  # gold answer box: green, solid; the gold evidence region: green, dotted
STEP = "#2563eb"  # the model's cited step boxes: blue, dashed
ANSWER = "#dc2626"  # the box the model's answer cites: red, solid
THUMBNAIL_WIDTH = 600  # pixels of the embedded page thumbnails (shown at 300 CSS pixels)


@dataclass(frozen=True)
class ModelSummary:
    name: str
    questions: int
    well_formed: int  # parsed without a format error
    with_boxes: int  # cited at least one box that parsed
    correct: int


@dataclass(frozen=True)
class ModelAnswers:
    """One model's parsed chain-of-evidence answers to the demo's questions, in order."""

    name: str
    parsed: tuple[Parsed, ...]
    correct: tuple[bool, ...]
    finish: tuple[str, ...]

    def summary(self) -> ModelSummary:
        return ModelSummary(
            self.name,
            len(self.parsed),
            sum(not p.errors for p in self.parsed),
            sum(_has_box(p) for p in self.parsed),
            sum(self.correct),
        )

    def row(self, sample: Sample, index: int) -> dict[str, object]:
        """The JSON record of this model's answer to ``sample`` (boxes with their page ids)."""
        p = self.parsed[index]
        steps = [
            {"text": s.text, "page_id": _page_id(sample, s.page_index), "box": _coords(s.box)}
            for s in p.steps
        ]
        answer_box = (
            {"page_id": _page_id(sample, p.answer_page), "box": _coords(p.answer_box)}
            if p.answer_box is not None
            else None
        )
        return {
            "prediction": p.answer,
            "correct": self.correct[index],
            "parse_errors": list(p.errors),
            "steps": steps,
            "answer_box": answer_box,
            "finish_reason": self.finish[index],
            "output": p.text,
        }


@dataclass(frozen=True)
class HeldOutPages:
    """Questions over documents the model never trained on, answered at each phase of training."""

    samples: tuple[Sample, ...]
    answers: tuple[ModelAnswers, ...]  # one per phase (before training, after SFT, after RL)
    measured: int  # how many held-out questions the held-out reward averages (these and others)


def _has_box(p: Parsed) -> bool:
    return p.answer_box is not None or any(s.box is not None for s in p.steps)


def _coords(box: Box | None) -> list[float] | None:
    return list(box.as_tuple()) if box is not None else None


def _page_id(sample: Sample, index: int | None) -> str | None:
    return sample.pages[index].id if index is not None and 0 <= index < len(sample.pages) else None


class HeldOutReward(TypedDict):
    """The mean held-out reward of one phase of training."""

    reward: float
    components: dict[str, float]
    samples: int


class Training(TypedDict):
    """What the learning stage did: its curves and held-out rewards (report.json's summary.training)."""

    task: str
    sft_steps: int
    rl_steps: int
    train_questions: int
    held_out: dict[str, HeldOutReward]  # per phase: before, after_sft, after_rl
    sft_loss: list[float]
    rl_reward: list[float]


def _page_boxes(sample: Sample, page_index: int, parsed: Parsed | None) -> tuple[ViewerBox, ...]:
    from evidra.eval.viewer import ViewerBox

    page = sample.pages[page_index]
    boxes = []
    evidence = sample.evidence_box
    if evidence is not None and evidence.page_id == page.id:
        boxes.append(ViewerBox(evidence.box, "gold evidence", GOLD, "dotted"))
    boxes += [ViewerBox(b.box, "gold answer", GOLD) for b in sample.gold_boxes if b.page_id == page.id]
    if parsed is None:
        return tuple(boxes)
    for k, step in enumerate(parsed.steps, 1):
        if (
            step.box is not None
            and step.page_index == page_index
            and _inside(step.box, page.width, page.height)
        ):
            boxes.append(ViewerBox(step.box, f"cited by step {k}", STEP, "dashed"))
    box = parsed.answer_box
    if box is not None and parsed.answer_page == page_index and _inside(box, page.width, page.height):
        boxes.append(ViewerBox(box, "cited by the answer", ANSWER))
    return tuple(boxes)


def caption(page: Page, index: int) -> str:
    """``"image 2: doc_000.pdf p.1"``: the page's place among the images shown with the question
    (the ``Image_index`` an answer cites), then the document page it is.

    >>> caption(Page("d-p1", "d.png", 10, 10, source="doc_000.pdf", page_number=1), 1)
    'image 2: doc_000.pdf p.1'
    """
    return f"image {index + 1}: {page.source} p.{page.page_number}"


def _inside(box: Box, width: int, height: int) -> bool:
    """A box the page can show (a model may cite coordinates past the page; those are listed in
    the output, not drawn)."""
    return 0 <= box.x1 < box.x2 <= width and 0 <= box.y1 < box.y2 <= height


def _record(
    sample: Sample, images: Mapping[str, str], answers: ModelAnswers | None, index: int
) -> ViewerRecord:
    from evidra.eval.viewer import ViewerPage, ViewerRecord

    parsed = answers.parsed[index] if answers is not None else None
    pages = tuple(
        ViewerPage(
            images.get(p.id, p.image_path), p.width, p.height, caption(p, k), _page_boxes(sample, k, parsed)
        )
        for k, p in enumerate(sample.pages)
    )
    if answers is None or parsed is None:
        return ViewerRecord(sample.question, None, sample.answers, None, pages)
    details = {"well-formed": "yes"}
    if parsed.errors:
        details = {"well-formed": "no", "format errors": "; ".join(parsed.errors)}
    return ViewerRecord(
        sample.question,
        parsed.answer,
        sample.answers,
        answers.correct[index],
        pages,
        parsed.text,
        details=details,
        heading=answers.name,
    )


def write_demo_report(
    path: Path,
    samples: Sequence[Sample],
    answers: Sequence[ModelAnswers],
    images: Mapping[str, str],
    *,
    model_name: str,
    training: Training | None,
    given_model: bool,
    held_out: HeldOutPages | None = None,
) -> Path:
    """``report.html``: the summary, then one card per question (models side by side); with
    ``held_out``, first a section of held-out questions (one answer per phase), then the
    training questions in a section of their own."""
    from evidra.eval.viewer import ViewerItem, ViewerSection, write_viewer

    cards: list[ViewerItem | ViewerSection] = []
    if held_out is not None:
        note = _held_out_note(held_out, samples)
        cards.append(ViewerSection("Held-out pages: documents the model never trained on", note))
        cards += [
            tuple(_record(s, images, a, i) for a in held_out.answers) for i, s in enumerate(held_out.samples)
        ]
        cards.append(ViewerSection("Training questions: learned by heart", _trained_note(len(samples))))
    cards += [tuple(_record(s, images, a, i) for a in answers) for i, s in enumerate(samples)]
    preamble = _preamble(model_name, [a.summary() for a in answers], training, given_model)
    return write_viewer(cards, path, title="evidra demo", preamble=preamble, thumbnail_width=THUMBNAIL_WIDTH)


def _held_out_note(held: HeldOutPages, trained: Sequence[Sample]) -> str:
    """What the held-out section shows and what was measured on it after training, in plain words."""
    n = len(held.samples)
    last = held.answers[-1]
    final = last.summary()
    recited = _recited(last, trained)
    text = (
        f"{n} questions over documents drawn by the same generator with another seed, answered greedily "
        f"{_listed([a.name for a in held.answers])}: the answers whose rewards the held-out table "
        f"averages (with those to the other {held.measured - n} held-out questions). "
        f"Measured {last.name}: {final.well_formed} of {n} answers are well-formed, {final.with_boxes} "
        f"cite a box, {final.correct} are correct and {recited} repeat the answer of a training question."
    )
    if any(a.summary().correct for a in held.answers[1:]):
        return text
    verdict = " This model cannot yet read a page it has not seen"
    if recited == n:
        return f"{text}{verdict}: it answers with what it learned for the training questions."
    return f"{text}{verdict}."


def _listed(names: Sequence[str]) -> str:
    """``"a, b and c"``.

    >>> _listed(["before training", "after SFT", "after RL"])
    'before training, after SFT and after RL'
    """
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"


def _recited(answers: ModelAnswers, trained: Sequence[Sample]) -> int:
    """How many of ``answers`` are the gold answer of a training question."""
    from evidra.metrics.text import exact_match

    gold = {g for s in trained for g in s.answers}
    return sum(
        p.answer is not None and any(exact_match(p.answer, g) == 1.0 for g in gold) for p in answers.parsed
    )


def _trained_note(n: int) -> str:
    return (
        f"The {n} questions the model trained on, answered before and after training. Right answers "
        "and boxes here are recalled from training, not read from the page."
    )


@dataclass(frozen=True)
class _Chart:
    png_base64: str
    alt: str


def _charts(training: Training) -> tuple[_Chart, ...] | None:
    """The training charts as embedded PNGs; None without matplotlib."""
    try:
        from evidra.eval.plots import bar_chart_png, line_chart_png

        held = training["held_out"]
        pngs = [
            (
                line_chart_png(
                    {"SFT loss": training["sft_loss"]}, title="SFT loss per step", ylabel="token NLL"
                ),
                "SFT loss",
            ),
            (
                line_chart_png(
                    {"mean reward": training["rl_reward"]},
                    title="GRPO training reward per step",
                    ylabel="LAT reward",
                ),
                "GRPO reward",
            ),
            (
                bar_chart_png(
                    {k: {"total": h["reward"], **h["components"]} for k, h in held.items()},
                    title="held-out LAT reward",
                    ylabel="reward",
                ),
                "held-out reward",
            ),
        ]
    except MissingDependencyError:
        return None
    return tuple(_Chart(base64.b64encode(png).decode("ascii"), alt) for png, alt in pngs)


def _preamble(
    model_name: str, summaries: Sequence[ModelSummary], training: Training | None, given: bool
) -> str:
    """The summary (and, after training, the learning curves) above the question cards."""
    held = training["held_out"] if training else {}
    return render(
        "demo_summary.html.j2",
        model_name=model_name,
        given=given,
        summaries=summaries,
        training=training,
        held=held,
        components=sorted({k for h in held.values() for k in h["components"]}),
        charts=_charts(training) if training else None,
        colors={"gold": GOLD, "step": STEP, "answer": ANSWER},
    )


__all__ = ["HeldOutPages", "ModelAnswers", "ModelSummary", "write_demo_report"]
