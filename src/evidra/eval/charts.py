"""Dependency-free SVG line charts for HTML reports (training curves in the demo report).

PNG plots with matplotlib live in ``evidra.eval.plots`` (optional extra); this is the fallback
every report can embed.

>>> svg = line_chart_svg({"reward": [0.0, 0.5, 1.0]}, title="reward")
>>> svg.startswith("<svg") and "polyline" in svg
True
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence

COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c")


def _points(values: Sequence[float], lo: float, hi: float, w: int, h: int, pad: int) -> str:
    n = max(1, len(values) - 1)
    span = hi - lo or 1.0
    coords = []
    for i, v in enumerate(values):
        x = pad + (w - 2 * pad) * i / n
        y = h - pad - (h - 2 * pad) * (v - lo) / span
        coords.append(f"{x:.1f},{y:.1f}")
    return " ".join(coords)


def line_chart_svg(
    series: Mapping[str, Sequence[float]],
    *,
    title: str = "",
    width: int = 560,
    height: int = 240,
    xlabel: str = "step",
) -> str:
    """An inline SVG with one polyline per series (non-finite values are dropped)."""
    clean = {k: [v for v in vals if math.isfinite(v)] for k, vals in series.items()}
    values = [v for vals in clean.values() for v in vals] or [0.0]
    lo, hi = min(values), max(values)
    pad = 36
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{html.escape(title, quote=True)}">',
        f'<rect width="{width}" height="{height}" fill="white" stroke="#cbd5e1"/>',
        f'<text x="{pad}" y="20" font-size="13">{html.escape(title)}</text>',
        f'<text x="4" y="{pad + 4}" font-size="10">{hi:.3g}</text>',
        f'<text x="4" y="{height - pad}" font-size="10">{lo:.3g}</text>',
        f'<text x="{width - pad - 30}" y="{height - 8}" font-size="10">{html.escape(xlabel)}</text>',
    ]
    for i, (name, vals) in enumerate(clean.items()):
        color = COLORS[i % len(COLORS)]
        if vals:
            pts = _points(vals, lo, hi, width, height, pad)
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{pts}"/>')
        parts.append(f'<text x="{width - 150}" y="{20 + 14 * i}" font-size="11" fill="{color}">'
                     f"{html.escape(name)}</text>")  # fmt: skip
    parts.append("</svg>")
    return "".join(parts)
