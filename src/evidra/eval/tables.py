"""Result rows and tables in the layout of the papers: methods as rows, benchmark x metric columns.

``summarize`` turns one run's predictions into a ``ResultRow`` (mean of every per-sample score,
MMLongBench-Doc's answerability F1, Wilson 95% intervals of the 0/1 metrics). ``LAYOUTS`` name
the metric groups each paper reports per benchmark (LAT Table 1: EM, IoU@0.5, SA; EVisRAG
Table 1: Acc, F1; the official metric of each benchmark; process statistics as in VRAG-RL and
CAVE's analyses). Rates are printed as percentages with one decimal, like the papers.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from evidra.core.registry import Registry
from evidra.core.types import Sample
from evidra.eval.metrics import METRICS
from evidra.eval.sample_scoring import Prediction
from evidra.eval.significance import wilson_interval
from evidra.metrics.mmlongbench import NOT_ANSWERABLE, ScoredAnswer, mmlongbench_acc_f1


@dataclass(frozen=True)
class ResultRow:
    """One run's aggregate: a row of a results table (and a line of results.jsonl)."""

    benchmark: str
    paradigm: str
    model: str
    n: int
    metrics: Mapping[str, float]
    intervals: Mapping[str, tuple[float, float]] = field(default_factory=dict)

    @property
    def method(self) -> str:
        return f"{self.model} / {self.paradigm}"

    def to_json(self) -> str:
        return json.dumps({**asdict(self), "metrics": dict(self.metrics), "intervals": dict(self.intervals)})


def _is_binary(values: Sequence[float]) -> bool:
    return all(v in (0.0, 1.0) for v in values)


def summarize(
    key: Mapping[str, str], predictions: Sequence[Prediction], samples: Sequence[Sample]
) -> ResultRow:
    """Means over samples (a metric missing for a sample is left out of its mean); the metrics
    in ``COUNTS`` are summed instead (e.g. how many answers the judge could not score)."""
    by_metric: dict[str, list[float]] = {}
    for p in predictions:
        for name, value in p.scores.items():
            by_metric.setdefault(name, []).append(value)
    metrics = {k: sum(v) if k in COUNTS else sum(v) / len(v) for k, v in by_metric.items()}
    intervals = {}
    for name, values in by_metric.items():
        if _is_binary(values) and name not in COUNTS:
            ci = wilson_interval(sum(values), len(values))
            intervals[name] = (ci.low, ci.high)
    for name in [n for n in metrics if n in METRICS and METRICS.get(n).aggregation == "f1"]:
        # reported as Acc and answerability F1 (MMLongBench-Doc): the metric's registered aggregation
        items = [
            ScoredAnswer(s.answers[0] if s.answers else "", p.answer or NOT_ANSWERABLE, p.scores[name])
            for s, p in zip(samples, predictions, strict=True)
            if name in p.scores
        ]
        metrics[f"{name.removesuffix('_score')}_f1"] = mmlongbench_acc_f1(items)[1]
    return ResultRow(key["benchmark"], key["paradigm"], key["model"], len(predictions), metrics, intervals)


def breakdown(
    key: Mapping[str, str], predictions: Sequence[Prediction], samples: Sequence[Sample], field_name: str
) -> list[ResultRow]:
    """One row per value of ``sample.extras[field_name]`` (ChartQA human/augmented ``subset``,
    VISA ``stratum``, MMLongBench ``page_kind``/``doc_type``), plus their macro average, the
    secondary VISA summary. Benchmarks are named ``bench[field=value]`` and ``bench[field=macro]``."""
    groups: dict[str, list[int]] = {}
    for i, s in enumerate(samples):
        if field_name in s.extras:
            groups.setdefault(str(s.extras[field_name]), []).append(i)
    rows = []
    for value, idx in groups.items():
        sub_key = {**key, "benchmark": f"{key['benchmark']}[{field_name}={value}]"}
        rows.append(summarize(sub_key, [predictions[i] for i in idx], [samples[i] for i in idx]))
    if len(rows) > 1:
        names = set.intersection(*(set(r.metrics) for r in rows))
        macro = {m: sum(r.metrics[m] for r in rows) / len(rows) for m in names}
        bench = f"{key['benchmark']}[{field_name}=macro]"
        rows.append(ResultRow(bench, key["paradigm"], key["model"], sum(r.n for r in rows), macro))
    return rows


LAYOUTS: Registry[tuple[str, ...]] = Registry("table layout")
LAYOUTS.add("lat", ("em", "iou50", "sa"))  # LAT Tables 1-2
LAYOUTS.add("evisrag", ("evisrag_acc", "evisrag_f1"))  # EVisRAG Table 1
LAYOUTS.add(
    "official",
    (
        "anls",
        "appa",
        "relaxed_accuracy",
        "slidevqa_em",
        "slidevqa_f1",
        "mmlongbench_score",
        "mmlongbench_f1",
        "visrag_accuracy",
        "exact_match",
        "synthetic_accuracy",
        "judge_accuracy",
        "judge_unscored",
    ),
)
LAYOUTS.add("retrieval", ("recall@1", "recall@5", "ndcg@5", "mrr@10"))
LAYOUTS.add(
    "process",
    (
        "finished",
        "format_ok",
        "invalid_rate",
        "turns",
        "tool_calls",
        "useful_zoom_rate",
        "tokens",
        "latency_s",
    ),
)

LABELS = {
    "em": "EM",
    "iou50": "IoU@0.5",
    "sa": "SA",
    "evisrag_acc": "Acc",
    "evisrag_f1": "F1",
    "anls": "ANLS",
    "appa": "APPA",
    "relaxed_accuracy": "Relaxed Acc",
    "slidevqa_em": "EM",
    "slidevqa_f1": "F1",
    "mmlongbench_score": "Acc",
    "mmlongbench_f1": "F1",
    "visrag_accuracy": "Acc",
    "exact_match": "Acc",
    "synthetic_accuracy": "Acc",
    "judge_accuracy": "Judge Acc",
    "judge_unscored": "Judge unscored",
    "finished": "Finish",
    "format_ok": "Format",
    "invalid_rate": "Invalid",
    "turns": "Turns",
    "tool_calls": "Tools",
    "useful_zoom_rate": "Useful zoom",
    "tokens": "Tokens",
    "latency_s": "Latency (s)",
}
RAW = frozenset({"turns", "tool_calls", "tokens", "latency_s"})  # printed as is, not as %
COUNTS = frozenset({"judge_unscored"})  # per-sample 0/1 flags summed into a count, printed as one


def _fmt(name: str, value: float | None) -> str:
    if value is None:
        return "-"
    if name in COUNTS:
        return str(round(value))
    return f"{value:.2f}" if name in RAW else f"{100 * value:.1f}"


def table_cells(rows: Sequence[ResultRow], layout: str) -> tuple[list[str], list[list[str]]]:
    """Header and body: one row per method, ``benchmark metric`` columns present in any row."""
    wanted = LAYOUTS.get(layout)
    benchmarks = list(dict.fromkeys(r.benchmark for r in rows))
    columns = [
        (b, m) for b in benchmarks for m in wanted if any(r.benchmark == b and m in r.metrics for r in rows)
    ]
    methods = list(dict.fromkeys(r.method for r in rows))
    index = {(r.method, r.benchmark): r for r in rows}
    header = ["Method"] + [f"{b} {LABELS.get(m, m)}" for b, m in columns]
    body = []
    for method in methods:
        cells = [method]
        for b, m in columns:
            row = index.get((method, b))
            cells.append(_fmt(m, row.metrics.get(m) if row else None))
        body.append(cells)
    return header, body


def to_markdown(rows: Sequence[ResultRow], layout: str) -> str:
    header, body = table_cells(rows, layout)
    esc = [[c.replace("|", "\\|") for c in line] for line in [header, *body]]
    lines = ["| " + " | ".join(esc[0]) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(line) + " |" for line in esc[1:]]
    return "\n".join(lines) + "\n"


def to_csv(rows: Sequence[ResultRow], layout: str) -> str:
    header, body = table_cells(rows, layout)
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(body)
    return buf.getvalue()


def write_tables(
    rows: Sequence[ResultRow], out_dir: str | Path, layouts: Sequence[str] | None = None
) -> list[Path]:
    """``tables.md`` (one section per layout with any column) and ``table_<layout>.csv``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written, sections = [], []
    for layout in layouts or LAYOUTS.names():
        header, _ = table_cells(rows, layout)
        if len(header) == 1:
            continue
        sections.append(f"## {layout}\n\n{to_markdown(rows, layout)}")
        path = out / f"table_{layout}.csv"
        path.write_text(to_csv(rows, layout), encoding="utf-8")
        written.append(path)
    md = out / "tables.md"
    md.write_text("\n".join(sections), encoding="utf-8")
    return [md, *written]
