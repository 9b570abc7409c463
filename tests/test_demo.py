from __future__ import annotations

import json
from pathlib import Path

from evidra.cli.main import main


def test_demo_runs_end_to_end(tmp_path: Path, capsys: object) -> None:
    out = tmp_path / "demo"
    assert main(["-q", "demo", "--out", str(out), "--docs", "2"]) == 0
    report = json.loads((out / "report.json").read_text())
    summary, rows = report["summary"], report["questions"]
    assert summary["questions"] == len(rows) > 0 and summary["pages"] > 0
    assert any(not r["answerable"] for r in rows) and any(r["gold_boxes"] for r in rows)
    assert all(r["finish_reason"] in {"eos", "stop", "length"} for r in rows)
    html = (out / "report.html").read_text()
    assert html.count('class="rec"') == len(rows)
    first = rows[0]["question"].replace("'", "&#x27;")
    assert first in html
    # every page image the viewer links to exists, relative to the report
    import re

    for src in re.findall(r'<img src="([^"]+)"', html):
        assert (out / src).is_file()
