"""PNG plots: training curves from a run's ``metrics.jsonl`` and metric comparisons of results.

matplotlib is an optional extra (``pip install 'evidra[plots]'``), imported inside each
function with the Agg backend, so plotting works headless and the library imports without it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from evidra.errors import InvalidInputError, MissingDependencyError
from evidra.eval.tables import LABELS, ResultRow


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise MissingDependencyError(
            "plots need matplotlib; install the extra: pip install 'evidra[plots]'"
        ) from exc
    return plt


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
    from evidra.rl.sink import read_metrics

    rows = read_metrics(metrics_jsonl)
    present = [k for k in keys if any(k in r for r in rows)]
    if not present:
        raise InvalidInputError(f"{metrics_jsonl}: none of the metrics {list(keys)} were logged")
    plt = _pyplot()
    fig, axes = plt.subplots(len(present), 1, figsize=(6, 2.6 * len(present)), squeeze=False)
    for ax, key in zip(axes[:, 0], present, strict=True):
        pts = [(r["step"], float(r[key])) for r in rows if key in r and "step" in r]
        steps, values = [p[0] for p in pts], [p[1] for p in pts]
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


def _save(plt: Any, fig: Any, out_png: str | Path) -> Path:
    """Lay out, write (creating the folder) and close a figure."""
    fig.tight_layout()
    out = Path(out_png)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out
