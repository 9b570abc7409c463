from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from evidra.cli.main import main


def _check_report(out: Path) -> dict:
    report = json.loads((out / "report.json").read_text())
    summary, rows = report["summary"], report["questions"]
    assert summary["questions"] == len(rows) > 0 and summary["pages"] > 0
    assert any(not r["answerable"] for r in rows) and any(r["gold_boxes"] for r in rows)
    assert all(r["finish_reason"] in {"eos", "stop", "length"} for r in rows)
    html = (out / "report.html").read_text()
    assert html.count('class="rec"') >= len(rows)
    assert rows[0]["question"].replace("'", "&#x27;") in html
    for src in re.findall(r'<img src="([^"]+)"', html):  # every linked page image exists
        assert (out / src).is_file()
    return report


def test_demo_answers_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    assert main(["-q", "demo", "--out", str(out), "--docs", "2", "--no-train"]) == 0
    assert _check_report(out)["summary"]["training"] is None


@pytest.mark.slow
def test_demo_learning_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["-q", "demo", "--out", str(out), "--docs", "2", "--sft-steps", "20", "--rl-steps", "2"]) == 0
    training = _check_report(out)["summary"]["training"]
    assert len(training["sft_loss"]) == 20 and len(training["rl_reward"]) == 2
    assert training["sft_loss"][-1] < training["sft_loss"][0]
    assert set(training["held_out"]) == {"before", "after_sft", "after_rl"}
    html = (out / "report.html").read_text()
    assert html.count("<svg") == 2 and "GRPO training reward" in html
    assert "held-out LAT reward: before" in capsys.readouterr().out
