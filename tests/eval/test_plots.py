"""Training-curve and comparison plots (matplotlib is the optional extra [plots])."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.eval.plots import smooth
from evidra.eval.tables import ResultRow


def test_smooth_hand_values() -> None:
    assert smooth([2.0, 4.0, 6.0, 8.0], 3) == [2.0, 3.0, 4.0, 6.0]
    with pytest.raises(InvalidInputError):
        smooth([1.0], 0)


def test_training_and_comparison_pngs(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from PIL import Image

    from evidra.eval.plots import plot_comparison, plot_training

    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        "".join(json.dumps({"step": s, "reward/mean": s / 10, "loss": 1 / (s + 1)}) + "\n" for s in range(20))
    )
    png = plot_training(metrics, tmp_path / "curves.png", window=5)
    with Image.open(png) as im:
        assert im.format == "PNG" and im.size == (600, 520)  # two 6 x 2.6 in panels at 100 dpi
    rows = [
        ResultRow("chartqa", "direct", "m", 10, {"exact_match": 0.5}, {"exact_match": (0.24, 0.76)}),
        ResultRow("chartqa", "coe", "m", 10, {"exact_match": 0.7}),
    ]
    with Image.open(plot_comparison(rows, "exact_match", tmp_path / "cmp.png")) as im:
        assert im.format == "PNG"
    with pytest.raises(InvalidInputError, match="anls"):
        plot_comparison(rows, "anls", tmp_path / "x.png")
    with pytest.raises(InvalidInputError, match="kl"):
        plot_training(metrics, tmp_path / "y.png", keys=("kl",))


def test_comparison_tolerates_rounded_bounds(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from evidra.eval.plots import plot_comparison
    from evidra.eval.significance import wilson_interval

    ci = wilson_interval(0, 6)  # the lower bound is computed, not exactly 0
    row = ResultRow("b", "direct", "m", 6, {"exact_match": 0.0}, {"exact_match": (ci.low + 1e-12, ci.high)})
    assert plot_comparison([row], "exact_match", tmp_path / "z.png").is_file()


def test_embeddable_line_and_bar_charts_have_axes() -> None:
    pytest.importorskip("matplotlib")
    import io

    from PIL import Image

    from evidra.eval.plots import bar_chart_png, line_chart_png

    line = line_chart_png({"loss": [3.0, 2.0, float("nan"), 1.0]}, title="loss", ylabel="nll")
    bars = bar_chart_png({"before": {"total": -1.0}, "after": {"total": 0.5}}, title="r", ylabel="reward")
    for png in (line, bars):
        assert png.startswith(b"\x89PNG")
        with Image.open(io.BytesIO(png)) as im:
            rgb = im.convert("RGB")
        dark = sum(n for n, (r, g, b) in rgb.getcolors(1 << 20) or [] if r + g + b < 150)  # axes, ticks, text
        assert rgb.width >= 400 and dark > 500
