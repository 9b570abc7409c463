"""PNG plots: training curves from a run's ``metrics.jsonl`` and metric comparisons of results.

matplotlib is an optional extra (``pip install 'evidra[plots]'``), imported inside each
function with the Agg backend, so plotting works headless and the library imports without it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError, MissingDependencyError
from evidra.eval.tables import LABELS, ResultRow

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from evidra.core.jsonvalue import JSONObject


def _pyplot() -> ModuleType:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(
            "plots need matplotlib; install the extra: pip install 'evidra[plots]'"
        ) from exc
    return plt


def _points(rows: Sequence[JSONObject], key: str, path: str | Path) -> tuple[list[float], list[float]]:
    """(steps, values) of metric ``key`` in the records that log it; a value or step that is not
    a number is one line naming the file and the key."""
    steps: list[float] = []
    values: list[float] = []
    for r in (r for r in rows if key in r and "step" in r):
        step, value = r["step"], r[key]
        if not isinstance(step, (int, float)) or not isinstance(value, (int, float)):
            raise InvalidInputError(f"{path}: {key!r} at step {step!r} is {value!r}, not a number")
        steps.append(step)
        values.append(float(value))
    return steps, values


def smooth(values: Sequence[float], window: int) -> list[float]:
    """Trailing moving average over up to ``window`` points (the first points average fewer).

    >>> smooth([1.0, 3.0, 5.0, 7.0], 2)
    [1.0, 2.0, 4.0, 6.0]
    """
    if window < 1:
        raise InvalidInputError(f"smoothing window must be >= 1, got {window}")
    out = []
    for i in range(len(values)):
        chunk = values[max(0, i - window + 1) : i + 1]
        out.append(sum(chunk) / len(chunk))
    return out


def plot_training(
    metrics_jsonl: str | Path,
    out_png: str | Path,
    keys: Sequence[str] = ("reward/mean", "loss"),
    window: int = 1,
) -> Path:
    """One panel per metric key against ``step`` (raw, plus the moving average when window > 1)."""
    from evidra.safeio.sink import read_metrics

    rows = read_metrics(metrics_jsonl)
    present = [k for k in keys if any(k in r for r in rows)]
    if not present:
        raise InvalidInputError(f"{metrics_jsonl}: none of the metrics {list(keys)} were logged")
    plt = _pyplot()
    fig, axes = plt.subplots(len(present), 1, figsize=(6, 2.6 * len(present)), squeeze=False)
    for ax, key in zip(axes[:, 0], present, strict=True):
        steps, values = _points(rows, key, metrics_jsonl)
        ax.plot(steps, values, alpha=0.4 if window > 1 else 1.0, label=key)
        if window > 1:
            ax.plot(steps, smooth(values, window), label=f"{key} (avg {window})")
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    return _save(plt, fig, out_png)


def plot_comparison(rows: Sequence[ResultRow], metric: str, out_png: str | Path) -> Path:
    """Grouped bars: one group per benchmark, one bar per method, with Wilson intervals when known."""
    benches = list(dict.fromkeys(r.benchmark for r in rows if metric in r.metrics))
    methods = list(dict.fromkeys(r.method for r in rows if metric in r.metrics))
    if not benches:
        raise InvalidInputError(f"no result row has metric {metric!r}")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4, 1.5 * len(benches) * max(1, len(methods)) / 2), 3.5))
    width = 0.8 / len(methods)
    index = {(r.method, r.benchmark): r for r in rows}
    for k, method in enumerate(methods):
        xs: list[float] = []
        ys: list[float] = []
        errs: list[list[float]] = [[], []]
        for b, bench in enumerate(benches):
            row = index.get((method, bench))
            if row is None or metric not in row.metrics:
                continue
            value = row.metrics[metric]
            low, high = row.intervals.get(metric, (value, value))
            xs.append(b + k * width)
            ys.append(100 * value)
            errs[0].append(max(0.0, 100 * (value - low)))  # Wilson bounds can miss 0 or 1 by rounding
            errs[1].append(max(0.0, 100 * (high - value)))
        ax.bar(xs, ys, width, yerr=errs, capsize=3, label=method)
    ax.set_xticks([b + width * (len(methods) - 1) / 2 for b in range(len(benches))], benches)
    ax.set_ylabel(f"{LABELS.get(metric, metric)} (%)")
    ax.legend(fontsize=7)
    return _save(plt, fig, out_png)


def line_chart_png(
    series: Mapping[str, Sequence[float]], *, title: str, ylabel: str, xlabel: str = "step"
) -> bytes:
    """One line per series against its 1-based step, with axes, ticks and a legend, as PNG bytes
    (for embedding in an HTML report). Non-finite values are left as gaps."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.6, 2.8))
    for name, values in series.items():
        ax.plot(range(1, len(values) + 1), values, marker="." if len(values) <= 30 else None, label=name)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return _png_bytes(plt, fig)


def bar_chart_png(groups: Mapping[str, Mapping[str, float]], *, title: str, ylabel: str) -> bytes:
    """Grouped bars: one group per outer key, one bar per inner key (same inner keys in every
    group), value labels on the bars, as PNG bytes."""
    plt = _pyplot()
    names = list(groups)
    keys = list(dict.fromkeys(k for g in groups.values() for k in g))
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(keys) * max(1, len(names)) / 2 + 2), 2.8))
    width = 0.8 / max(1, len(names))
    for n, name in enumerate(names):
        xs = [k + n * width for k in range(len(keys))]
        bars = ax.bar(xs, [groups[name].get(key, 0.0) for key in keys], width, label=name)
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks([k + width * (len(names) - 1) / 2 for k in range(len(keys))], keys)
    ax.axhline(0, color="#64748b", linewidth=0.8)
    ax.set_title(title, fontsize=10)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize=7)
    return _png_bytes(plt, fig)


def _png_bytes(plt: ModuleType, fig: Figure) -> bytes:
    import io

    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return buf.getvalue()


def _save(plt: ModuleType, fig: Figure, out_png: str | Path) -> Path:
    """Lay out, write (creating the folder) and close a figure."""
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
