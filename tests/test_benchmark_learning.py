"""benchmarks/learning.py runs end to end on its quick setting and prints what it promises."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks"


@pytest.mark.slow
def test_learning_benchmark_quick_run_prints_every_phase_and_the_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("bench_learning", BENCH / "learning.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    module.main(["--quick", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    for phase in ("before", "sft", "rl"):
        assert re.search(rf"^\| {phase} \| [0-9.]+ \|", out, re.MULTILINE), out
    last = out.strip().splitlines()[-1]
    pattern = (
        r"RESULT heldout_acc_sft=[0-9.]+ heldout_acc_rl=[0-9.]+ heldout_iou50_sft=[0-9.]+ "
        r"heldout_iou50_rl=[0-9.]+ seeds=1 minutes=[0-9.]+"
    )
    assert re.fullmatch(pattern, last), last
    report = json.loads((tmp_path / "learning.json").read_text())
    (run,) = report["runs"]
    assert set(run["scores"]) == {"before", "sft", "rl"}
    assert len(run["sft_loss"]) == report["setting"]["sft_steps"]
    assert len(run["rl_reward"]) == report["setting"]["rl_steps"]
    assert all(-1.0 <= r <= 4.0 for r in run["rl_reward"])  # LAT's reward range
    if importlib.util.find_spec("matplotlib") is not None:
        assert (tmp_path / "learning.png").stat().st_size > 0
