"""The evidence viewer: step and answer boxes, step list, scores, escaping; rendered in Chromium."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from evidra.core.types import Box, EvidenceBox, Page, Sample
from evidra.eval.report import RunResult, viewer_record, write_report
from evidra.eval.sample_scoring import Prediction, StepBox
from evidra.eval.tables import ResultRow

EVIL = '<script>alert("x")</script>'


def _run(tmp_path: Path) -> RunResult:
    img = tmp_path / "page.png"
    Image.new("RGB", (200, 100), "white").save(img)
    page = Page("p1", str(img), 200, 100)
    sample = Sample(
        f"s1{EVIL}",
        f"What is {EVIL}?",
        ("42",),
        pages=(page,),
        gold_pages=("p1",),
        gold_boxes=(EvidenceBox("p1", Box(10, 10, 50, 30)),),
    )
    pred = Prediction(
        sample_id=sample.id,
        texts=(f"<think>step {EVIL}</think>",),
        answer=f"42 {EVIL}",
        answer_page=0,
        answer_box=(12.0, 11.0, 48.0, 29.0),
        steps=(StepBox(f"read the header {EVIL}", 0, (0.0, 0.0, 100.0, 50.0)), StepBox("no box", None, None)),
        scores={"exact_match": 1.0, "iou50": 1.0},
    )
    row = ResultRow("bench", "coe", "tiny", 1, {"exact_match": 1.0})
    return RunResult(row, (sample,), (pred,))


def test_viewer_record_boxes_and_steps(tmp_path: Path) -> None:
    run = _run(tmp_path)
    rec = viewer_record(run.samples[0], run.predictions[0], "bench / coe / tiny")
    labels = [b.label for b in rec.pages[0].boxes]
    assert labels == ["gold", "1", "answer"]  # the box-less step has no overlay
    assert [s.label for s in rec.steps] == ["1", "2"] and rec.correct is True
    assert rec.rewards == {"exact_match": 1.0, "iou50": 1.0}


def test_report_files_and_escaping(tmp_path: Path) -> None:
    paths = write_report([_run(tmp_path)], tmp_path / "out")
    assert [p.name for p in paths][:2] == ["results.jsonl", "tables.md"]
    html = (tmp_path / "out" / "viewer.html").read_text()
    assert "<script>" not in html and "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in html
    assert 'class="steps"' in html and "exact_match: 1" in html


def _chromium() -> str | None:
    return shutil.which("chromium") or (
        str(Path("/usr/bin/chromium")) if Path("/usr/bin/chromium").exists() else None
    )


@pytest.mark.slow
def test_viewer_in_headless_chromium(tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.skip(
            "chromium is not installed (Debian package 'chromium'); the viewer is checked only as text"
        )
    write_report([_run(tmp_path)], tmp_path / "out")
    url = (tmp_path / "out" / "viewer.html").resolve().as_uri()
    flags = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    flags += ["--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(
        [*flags, "--dump-dom", url], capture_output=True, text=True, timeout=90, check=True
    ).stdout
    assert dom.count('class="box"') == 3
    assert dom.count('<li><span class="tag"') == 2  # the two steps; the page legend lists its boxes
    assert dom.count('<ul class="legend">') >= 1 and dom.count('<li><i class="sw"') >= 1
    assert "alert(" in dom and "<script>alert" not in dom  # escaped text, not a script element
    shot = tmp_path / "shot.png"
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=900,700", url],
        capture_output=True,
        timeout=90,
        check=True,
    )
    with Image.open(shot) as im:
        rgb = im.convert("RGB")
        assert rgb.size == (900, 700)
        colours = {c for _, c in rgb.getcolors(maxcolors=1 << 20) or []}
    assert any(abs(r - 220) < 8 and g < 60 and b < 60 for r, g, b in colours)  # the red answer box is drawn


def test_significance_table_pairs_runs_by_sample() -> None:
    from evidra.eval.report import significance_markdown

    samples = tuple(Sample(f"q{i}", "q?", ("a",)) for i in range(10))

    def run(paradigm: str, right: set[int]) -> RunResult:
        preds = tuple(
            Prediction(f"q{i}", ("t",), "a", scores={"exact_match": float(i in right)}) for i in range(10)
        )
        acc = len(right) / 10
        return RunResult(ResultRow("bench", paradigm, "m", 10, {"exact_match": acc}), samples, preds)

    # baseline right on 0-5, other right on 4-9: b = 4 (0-3), c = 4 (6-9) -> exact p = 1.0
    md = significance_markdown([run("direct", set(range(6))), run("coe", set(range(4, 10)))])
    assert md.splitlines()[2] == "| bench | m / direct | m / coe | exact_match | 60.0 | 60.0 | 4 | 4 | 1 |"


def test_box_labels_go_to_a_legend_and_thumbnails_open_a_lightbox(tmp_path: Path) -> None:
    from evidra.eval.viewer import ViewerBox, ViewerPage, ViewerRecord, write_viewer

    image = tmp_path / "page.png"
    Image.new("RGB", (200, 100), "white").save(image)
    close = (ViewerBox(Box(10, 10, 50, 30), "gold"), ViewerBox(Box(12, 11, 48, 29), "answer", "#dc2626"))
    rec = ViewerRecord("q?", "a", ("a",), True, (ViewerPage(str(image), 200, 100, "p1", close),))
    html = write_viewer([(rec, rec)], tmp_path / "out" / "v.html", thumbnail_width=50).read_text()
    assert (
        re.findall(r'class="box" title="([^"]+)"', html) == ["gold", "answer"] * 4
    )  # 2 cards x (thumb, big)
    assert "<span>gold</span>" in html and not re.search(
        r'class="box"[^>]*>[^<]', html
    )  # no text on the page
    assert html.count('class="lb"') == 2 and html.count('<img src="data:image/png;base64,') == 2
    assert html.count('<img src="../page.png"') == 2  # the full-size page, linked relative to the report
