"""``evidra eval`` end to end with the tiny checkpoint on synthetic benchmarks."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.paradigms import PARADIGMS


@pytest.mark.parametrize(
    "paradigms",
    [
        ["--paradigm", "direct", "--paradigm", "coe"],
        pytest.param(["--paradigm", "all"], marks=pytest.mark.slow),
    ],
)
def test_eval_paradigms_on_a_synthetic_benchmark(
    tiny_dirs: dict[str, Path], tmp_path: Path, paradigms: list[str]
) -> None:
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "2",
        *paradigms,
        "--model",
        str(tiny_dirs["qwen2_5_vl"]),
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    ran = {r["paradigm"] for r in rows}
    assert "direct" in ran and ran <= set(PARADIGMS.names())
    assert len(ran) == 2 if "coe" in paradigms else len(ran) >= 2  # "all" may skip what cannot prompt
    assert all(r["n"] == 2 and "synthetic_accuracy" in r["metrics"] for r in rows)
    # 8 new tokens always hit the cap: no episode counts as finished
    assert all(r["metrics"]["finished"] == 0.0 and r["metrics"]["tokens"] == 8.0 for r in rows)
    table = list(csv.reader((out / "table_official.csv").open()))
    assert table[0] == ["Method", "tunnel.chain Acc"] and len(table) == len(rows) + 1
    assert (out / "tables.md").read_text().count("| qwen2_5_vl / ") >= len(rows)
    assert (out / "significance.md").read_text().count("| tunnel.chain |") == len(rows) - 1
    if __import__("importlib").util.find_spec("matplotlib"):
        assert (out / "compare_synthetic_accuracy.png").is_file()
    html = (out / "viewer.html").read_text()
    assert html.count('class="rec"') == 2 * len(rows)
    # rerun resumes from the cache: no new prediction rows
    before = (out / "predictions.jsonl").read_text().count("\n")
    assert main(argv) == 0
    assert (out / "predictions.jsonl").read_text().count("\n") == before


def test_eval_needs_a_benchmark_and_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--paradigm", "direct", "--out", str(tmp_path)]) == 2
    assert "nothing to evaluate" in capsys.readouterr().err
    assert main(["eval", "--synthetic", "tunnel.chain", "--n", "1", "--out", str(tmp_path)]) == 2
    assert "--model PATH" in capsys.readouterr().err


def test_eval_a_published_benchmark_loader(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    fixture = Path(__file__).parents[1] / "fixtures" / "benchmarks" / "docvqa" / "val_v1.0.json"
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--benchmark",
        "docvqa",
        "--data",
        str(fixture),
        "--option",
        f"image_dir={tmp_path / 'img'}",
    ]
    argv += ["--paradigm", "direct", "--model", str(tiny_dirs["qwen2_vl"]), "--max-new-tokens", "4"]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text(
        "".join(json.dumps({"step": s, "reward/mean": s / 4, "loss": 1.0}) + "\n" for s in range(4))
    )
    argv += ["--out", str(out), "--training-metrics", str(metrics)]
    assert main(argv) == 0
    if __import__("importlib").util.find_spec("matplotlib"):
        assert (out / "training_curves.png").is_file()
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    assert row["benchmark"] == "docvqa" and row["n"] == 1 and "anls" in row["metrics"]
    header = next(csv.reader((out / "table_official.csv").open()))
    assert header == ["Method", "docvqa ANLS"]


def test_eval_multi_turn_zoom_environment(tiny_dirs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "eval"
    argv = ["eval", "--synthetic", "tunnel.chain", "--n", "1", "--paradigm", "zoom_agent", "--env", "zoom"]
    argv += [
        "--max-turns",
        "2",
        "--model",
        str(tiny_dirs["qwen2_5_vl"]),
        "--max-new-tokens",
        "6",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # the tiny model never writes a valid tool call: --max-turns 2 is the environment's round limit,
    # so one invalid turn, then the second turn reaches the limit and ends the episode
    assert row["metrics"]["turns"] == 2.0 and row["metrics"]["invalid_rate"] == 0.5
    assert row["metrics"]["finished"] == 0.0 and row["metrics"]["tool_calls"] == 0.0


def test_eval_search_environment_over_a_benchmark_index(
    tiny_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    slides = Path(__file__).parents[1] / "fixtures" / "benchmarks" / "slidevqa" / "test.jsonl"
    data = ["--data", str(slides), "--option", "n_slides=3"]
    idx = tmp_path / "idx"
    assert (
        main(
            [
                "index",
                "build",
                "--dataset",
                "slidevqa",
                *data,
                "--out",
                str(idx),
                "--encoder",
                "colqwen2",
                "--model",
                str(tiny_dirs["colqwen2"]),
            ]
        )
        == 0
    )
    base = [
        "eval",
        "--benchmark",
        "slidevqa",
        *data,
        "--paradigm",
        "search_agent",
        "--max-turns",
        "2",
        "--model",
        str(tiny_dirs["qwen2_5_vl"]),
        "--max-new-tokens",
        "6",
    ]
    argv = [*base, "--env", "search"]
    assert main([*argv, "--index", str(idx), "--out", str(tmp_path / "eval")]) == 0
    (row,) = [json.loads(line) for line in (tmp_path / "eval" / "results.jsonl").read_text().splitlines()]
    assert row["paradigm"] == "search_agent" and row["metrics"]["turns"] == 2.0
    capsys.readouterr()
    # slide images have no text layer: without --index, BM25 could find nothing, and says so
    assert main([*argv, "--out", str(tmp_path / "bm25")]) == 2
    assert "text layer" in capsys.readouterr().err
    assert main([*base, "--index", str(idx), "--out", str(tmp_path / "x")]) == 2
    assert "--index is for --env search" in capsys.readouterr().err


def test_eval_multi_turn_environment_defaults_to_its_own_turn_limit(
    tiny_dirs: dict[str, Path], tmp_path: Path
) -> None:
    from evidra.env.zoom import ZoomEnv

    out = tmp_path / "eval"
    argv = [
        "eval",
        "--synthetic",
        "tunnel.chain",
        "--n",
        "1",
        "--paradigm",
        "zoom_agent",
        "--env",
        "zoom",
        "--model",
        str(tiny_dirs["qwen2_5_vl"]),
        "--max-new-tokens",
        "4",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    # no --max-turns: the zoom environment's own round limit ends the episode, not one turn
    assert row["metrics"]["turns"] == float(ZoomEnv.max_rounds) > 1


@pytest.mark.parametrize(("method", "layout"), [("evisrag", "evisrag"), ("cave", "official")])
def test_eval_method_writes_its_papers_table(
    tiny_dirs: dict[str, Path], tmp_path: Path, method: str, layout: str
) -> None:
    """``eval --method NAME`` writes that method's table (``Method.layout``: EVisRAG's Acc / F1,
    the benchmark's official metric for CAVE), not every layout the metrics fill."""
    from evidra.methods import METHODS

    assert METHODS.get(method).layout == layout
    out = tmp_path / "eval"
    argv = [
        "eval",
        "--synthetic",
        "documents",
        "--n",
        "1",
        "--method",
        method,
        "--model",
        str(tiny_dirs["qwen2_5_vl"]),
        "--max-new-tokens",
        "8",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    assert sorted(p.name for p in out.glob("table_*.csv")) == [f"table_{layout}.csv"]
    sections = [line for line in (out / "tables.md").read_text().splitlines() if line.startswith("## ")]
    assert sections == [f"## {layout}"]
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    other = "exact_match" if layout != "official" else "turns"  # a column of a layout not written
    assert other in row["metrics"]
