"""The demo's report: a summary (model, training, counts, charts) above one card per question.

Each card shows the question, the gold answer and, side by side, each model's answer with the
boxes it cited drawn on the page beside the gold boxes (a legend names every colour; a click
enlarges a page). Page thumbnails are embedded, full-size pages linked from the report's own
``images/`` folder and charts embedded as PNG, so the folder can be moved or zipped whole.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidra.errors import MissingDependencyError
from evidra.types import Box, Parsed, Sample

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


def _has_box(p: Parsed) -> bool:
    return p.answer_box is not None or any(s.box is not None for s in p.steps)


def _coords(box: Box | None) -> list[float] | None:
    return list(box.as_tuple()) if box is not None else None


def _page_id(sample: Sample, index: int | None) -> str | None:
    return sample.pages[index].id if index is not None and 0 <= index < len(sample.pages) else None


def _page_boxes(sample: Sample, page_index: int, parsed: Parsed | None) -> tuple[Any, ...]:
    from evidra.eval.viewer import ViewerBox

    page = sample.pages[page_index]
    boxes = []
    evidence = sample.extras.get("evidence_box")
    if isinstance(evidence, Box) and page.id in sample.gold_pages:
        boxes.append(ViewerBox(evidence, "gold evidence", GOLD, "dotted"))
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


def _inside(box: Box, width: int, height: int) -> bool:
    """A box the page can show (a model may cite coordinates past the page; those are listed in
    the output, not drawn)."""
    return 0 <= box.x1 < box.x2 <= width and 0 <= box.y1 < box.y2 <= height


def _record(sample: Sample, images: Mapping[str, str], answers: ModelAnswers | None, index: int) -> Any:
    from evidra.eval.viewer import ViewerPage, ViewerRecord

    parsed = answers.parsed[index] if answers is not None else None
    pages = tuple(
        ViewerPage(images.get(p.id, p.image_path), p.width, p.height, f"{p.source} p.{p.page_number}",
                   _page_boxes(sample, k, parsed))
        for k, p in enumerate(sample.pages)
    )  # fmt: skip
    if answers is None or parsed is None:
        return ViewerRecord(sample.question, None, sample.answers, None, pages)
    details = {"format errors": "; ".join(parsed.errors)} if parsed.errors else {}
    return ViewerRecord(
        sample.question, parsed.answer, sample.answers, answers.correct[index], pages, parsed.text,
        details=details, heading=answers.name,
    )  # fmt: skip


def write_demo_report(
    path: Path,
    samples: Sequence[Sample],
    answers: Sequence[ModelAnswers],
    images: Mapping[str, str],
    *,
    model_name: str,
    training: dict[str, Any] | None,
    given_model: bool,
) -> Path:
    """``report.html``: the summary, then one card per question (models side by side)."""
    from evidra.eval.viewer import write_viewer

    cards = [tuple(_record(s, images, a, i) for a in answers) for i, s in enumerate(samples)]
    preamble = _summary_html(model_name, [a.summary() for a in answers], training, given_model)
    if training:
        preamble += _training_html(training)
    return write_viewer(cards, path, title="evidra demo", preamble=preamble, thumbnail_width=THUMBNAIL_WIDTH)


def _summary_html(
    model_name: str, summaries: Sequence[ModelSummary], training: dict[str, Any] | None, given: bool
) -> str:
    e = html.escape
    if given:
        how = f"<p>Model: <b>{e(model_name)}</b>, used as given (no training).</p>"
    else:
        how = f"<p>Model: {e(model_name)}.</p>"
        if training:
            how += (
                f"<p>Training: an SFT cold start of {training['sft_steps']} steps on LAT's oracle "
                f"chain-of-evidence answers to the {training['train_questions']} questions below, then "
                f"{training['rl_steps']} GRPO steps with LAT's rewards (accuracy, step, grounding, "
                "format), on this machine's CPU. The questions below are the training questions: a "
                "model this small learns their answers and boxes by heart and cannot read a page, so "
                "its answers to new questions (the held-out table) stay wrong.</p>"
            )
        how += (
            "<p>A real checkpoint gives real answers: <code>evidra demo --model DIR</code> writes this "
            "report for a trained Qwen-VL model (a model folder, or a training run).</p>"
        )
    head = "<tr><th>model</th><th>questions</th><th>well-formed</th><th>cite a box</th><th>correct</th></tr>"
    rows = "".join(
        f"<tr><td>{e(s.name)}</td><td>{s.questions}</td><td>{s.well_formed}</td>"
        f"<td>{s.with_boxes}</td><td>{s.correct}</td></tr>"
        for s in summaries
    )
    legend = (
        f'<p style="font-size:13px">Boxes: <span style="color:{GOLD}">green solid</span> the gold answer, '
        f'<span style="color:{GOLD}">green dotted</span> the gold evidence, <span style="color:{STEP}">blue '
        f'dashed</span> a box a reasoning step cites, <span style="color:{ANSWER}">red</span> the box the '
        "answer cites. Click a page to enlarge it.</p>"
    )
    table = f'<table border="1" cellpadding="4" style="border-collapse:collapse">{head}{rows}</table>'
    return f'<div class="rec"><h2>Summary</h2>{how}{table}{legend}</div>'


def _png_img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    alt = html.escape(alt, quote=True)
    return f'<img src="data:image/png;base64,{data}" alt="{alt}" style="max-width:100%">'


def _charts_html(training: dict[str, Any]) -> str:
    try:
        from evidra.eval.plots import bar_chart_png, line_chart_png

        held = training["held_out"]
        charts = [
            _png_img(line_chart_png({"SFT loss": training["sft_loss"]}, title="SFT loss per step",
                                    ylabel="token NLL"), "SFT loss"),
            _png_img(line_chart_png({"mean reward": training["rl_reward"]}, title="GRPO training reward per "
                                    "step", ylabel="LAT reward"), "GRPO reward"),
            _png_img(bar_chart_png({k: {"total": h["reward"], **h["components"]} for k, h in held.items()},
                                   title="held-out LAT reward", ylabel="reward"), "held-out reward"),
        ]  # fmt: skip
    except MissingDependencyError:
        return "<p><i>Charts need matplotlib: pip install 'evidra[plots]'.</i></p>"
    return '<div style="display:flex;flex-wrap:wrap;gap:8px">' + "".join(charts) + "</div>"


def _training_html(training: dict[str, Any]) -> str:
    e = html.escape
    held = training["held_out"]
    keys = sorted({k for h in held.values() for k in h["components"]})
    head = "".join(f"<th>{e(k)}</th>" for k in ["model", "reward", *keys])
    rows = "".join(
        f"<tr><td>{e(name)}</td><td>{h['reward']:.3f}</td>"
        + "".join(f"<td>{h['components'].get(k, 0.0):.3f}</td>" for k in keys)
        + "</tr>"
        for name, h in held.items()
    )
    samples = next(iter(held.values()))["samples"]
    return (
        '<div class="rec"><h2>Learning: SFT cold start, then GRPO with LAT rewards</h2>'
        f"<p>Held-out reward (greedy, {samples} questions of other documents):</p>"
        f'<table border="1" cellpadding="4" style="border-collapse:collapse"><tr>{head}</tr>{rows}</table>'
        f"{_charts_html(training)}</div>"
    )


__all__ = ["ModelAnswers", "ModelSummary", "write_demo_report"]
