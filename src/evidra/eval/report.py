"""Reports of evaluation runs: results JSONL, paper-style tables and the HTML evidence viewer.

The viewer shows, per sample, every page with the gold boxes, the box of each reasoning step
(numbered like the step list beside the pages) and the answer box, plus the run's scores. All
text is escaped by the viewer's template (``evidra.eval.viewer``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evidra.core.templating import render
from evidra.core.types import Box, Page, Sample
from evidra.eval.sample_scoring import Prediction
from evidra.eval.significance import mcnemar
from evidra.eval.tables import LAYOUTS, ResultRow, write_tables
from evidra.eval.viewer import ViewerBox, ViewerPage, ViewerRecord, ViewerStep, outcome, write_viewer

GOLD, ANSWER = "#16a34a", "#dc2626"
STEP_COLORS = ("#2563eb", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777")


@dataclass(frozen=True)
class RunResult:
    """One evaluated run: its result row with the samples and predictions behind it."""

    row: ResultRow
    samples: tuple[Sample, ...]
    predictions: tuple[Prediction, ...]


def primary_score(scores: Mapping[str, float]) -> float | None:
    """The benchmark's headline metric: the first official metric present in ``scores``."""
    return next((scores[m] for m in LAYOUTS.get("official") if m in scores), None)


def _boxes_for_page(sample: Sample, p: Prediction, index: int) -> tuple[ViewerBox, ...]:
    page = sample.pages[index]
    boxes = [ViewerBox(g.box, "gold", GOLD) for g in sample.gold_boxes if g.page_id == page.id]
    for k, step in enumerate(p.steps, 1):
        if step.box is not None and step.page == index:
            boxes.append(ViewerBox(Box(*step.box), str(k), STEP_COLORS[(k - 1) % len(STEP_COLORS)], "dashed"))
    if p.answer_box is not None and p.answer_page == index:
        boxes.append(ViewerBox(Box(*p.answer_box), "answer", ANSWER))
    return tuple(boxes)


def _caption(page: Page, index: int) -> str:
    """``"image 2: report.pdf p. 3 · 30f9...-p0003"``: what the model calls the page, then the page."""
    cite = f"{page.citation} · {page.id}" if page.source else page.id
    return f"image {index + 1}: {cite}"


@dataclass(frozen=True)
class _SummaryRow:
    name: str
    n: int
    metrics: Mapping[str, float]
    correct: int
    wrong: int
    unparsed: int


def summary_html(runs: Sequence[RunResult], records: Sequence[ViewerRecord]) -> str:
    """The viewer's summary table: each run's metrics and its correct / wrong / unparsed counts."""
    rows, start = [], 0
    for run in runs:
        mine = [outcome(r) for r in records[start : start + len(run.predictions)]]
        start += len(run.predictions)
        name = f"{run.row.benchmark} / {run.row.paradigm} / {run.row.model}"
        rows.append(_SummaryRow(name, run.row.n, run.row.metrics, *(mine.count(o) for o in OUTCOME_COLUMNS)))
    metrics = list(dict.fromkeys(m for run in runs for m in run.row.metrics))
    return render("eval_summary.html.j2", metrics=metrics, rows=rows)


OUTCOME_COLUMNS = ("correct", "wrong", "unparsed")


def viewer_record(sample: Sample, p: Prediction, run: str = "") -> ViewerRecord:
    pages = tuple(
        ViewerPage(
            pg.image_path, pg.width, pg.height, title=_caption(pg, i), boxes=_boxes_for_page(sample, p, i)
        )
        for i, pg in enumerate(sample.pages)
    )
    steps = tuple(
        ViewerStep(str(k), s.text, STEP_COLORS[(k - 1) % len(STEP_COLORS)]) for k, s in enumerate(p.steps, 1)
    )
    primary = primary_score(p.scores)
    details = {"run": run, "sample": sample.id} if run else {"sample": sample.id}
    if p.errors:
        details["parse errors"] = "; ".join(p.errors)
    return ViewerRecord(
        question=sample.question,
        prediction=p.answer,
        answers=sample.answers,
        correct=None if primary is None else primary >= 0.5,
        pages=pages,
        output="\n---\n".join(p.texts),
        details=details,
        steps=steps,
        rewards=dict(p.scores),
    )


def _outcomes(run: RunResult, metric: str) -> dict[str, bool]:
    return {p.sample_id: p.scores[metric] >= 0.5 for p in run.predictions if metric in p.scores}


def significance_markdown(runs: Sequence[RunResult]) -> str:
    """McNemar's test of every run against the first run on the same benchmark (paired by sample
    id, on the benchmark's headline metric thresholded at 0.5)."""
    lines = [
        "| Benchmark | Baseline | Method | Metric | Baseline % | Method % | b | c | p |",
        "|" + "---|" * 9,
    ]
    for i, base in enumerate(runs):
        if any(r.row.benchmark == base.row.benchmark for r in runs[:i]):
            continue  # not the first run of its benchmark
        metric = next((m for m in LAYOUTS.get("official") if m in base.row.metrics), None)
        if metric is None:
            continue
        a = _outcomes(base, metric)
        for other in runs[i + 1 :]:
            if other.row.benchmark != base.row.benchmark:
                continue
            b = _outcomes(other, metric)
            ids = [k for k in a if k in b]
            if not ids:
                continue
            test = mcnemar([a[k] for k in ids], [b[k] for k in ids])
            acc_a = 100 * sum(a[k] for k in ids) / len(ids)
            acc_b = 100 * sum(b[k] for k in ids) / len(ids)
            lines.append(
                f"| {base.row.benchmark} | {base.row.method} | {other.row.method} | {metric} | {acc_a:.1f} | "
                f"{acc_b:.1f} | {test.b} | {test.c} | {test.p_value:.3g} |"
            )
    return "\n".join(lines) + "\n"


def write_report(
    runs: Sequence[RunResult],
    out_dir: str | Path,
    *,
    title: str = "evidra eval",
    layouts: Sequence[str] | None = None,
) -> list[Path]:
    """``results.jsonl``, ``tables.md`` + ``table_*.csv`` (the tables of ``layouts``; every layout
    with a column when None) and ``viewer.html`` under ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    results.write_text("".join(r.row.to_json() + "\n" for r in runs), encoding="utf-8")
    tables = write_tables([r.row for r in runs], out, layouts)
    records = [
        viewer_record(s, p, f"{r.row.benchmark} / {r.row.paradigm} / {r.row.model}")
        for r in runs
        for s, p in zip(r.samples, r.predictions, strict=True)
    ]
    preamble = summary_html(runs, records)
    viewer = write_viewer(records, out / "viewer.html", title=title, preamble=preamble, filters=True)
    significance = out / "significance.md"
    significance.write_text(significance_markdown(runs), encoding="utf-8")
    return [results, *tables, significance, viewer]
