"""Evidence a person can read: captions, enlarge, numbered box tags, one box where two coincide,
no gold line without gold, and the eval viewer's summary table and outcome filters."""

from __future__ import annotations

import re
from pathlib import Path

from PIL import Image

from evidra.core.types import Box, Page, Sample
from evidra.eval.report import RunResult, write_report
from evidra.eval.sample_scoring import Prediction
from evidra.eval.tables import ResultRow
from evidra.eval.viewer import (
    ViewerBox,
    ViewerPage,
    ViewerRecord,
    ViewerSection,
    merge_coinciding,
    outcome,
    write_viewer,
)


def _image(tmp_path: Path) -> str:
    Image.new("RGB", (200, 100), "white").save(tmp_path / "page.png")
    return str(tmp_path / "page.png")


def test_coinciding_boxes_become_one_with_both_labels() -> None:
    a, b, c = Box(10, 10, 50, 30), Box(10.3, 9.8, 50, 30.4), Box(60, 10, 90, 30)
    merged = merge_coinciding([ViewerBox(a, "2", "#00f"), ViewerBox(c, "3"), ViewerBox(b, "answer", "#0f0")])
    assert [(m.label, m.box, m.color) for m in merged] == [("2 · answer", a, "#00f"), ("3", c, "#16a34a")]
    assert merge_coinciding([ViewerBox(a, "1"), ViewerBox(a, "1")]) == (ViewerBox(a, "1"),)


def test_sections_head_the_cards_after_them_and_restart_their_numbers(tmp_path: Path) -> None:
    record = ViewerRecord("Q?", "42", (), None, ())
    items: list[ViewerRecord | ViewerSection] = [record, ViewerSection("New <pages>", "never trained on")]
    items += [record, record, ViewerSection("Old")]
    html = write_viewer(items, tmp_path / "v.html").read_text()
    assert re.findall(r'<h2 class="section">([^<]*)</h2>', html) == ["New &lt;pages&gt;"]  # "Old": no card
    assert '<p class="section-note">never trained on</p>' in html
    numbers = re.findall(r'<div class="rec" [^>]*id="(rec-\d+)"><h3>(\d+)\.', html)
    assert numbers == [("rec-0", "1"), ("rec-1", "1"), ("rec-2", "2")]  # anchors stay unique
    assert html.index("New &lt;pages&gt;") < html.index('id="rec-1"')


def test_pages_have_captions_enlarge_and_numbered_tags(tmp_path: Path) -> None:
    boxes = (ViewerBox(Box(10, 10, 50, 30), "1"), ViewerBox(Box(10, 10, 50, 30), "answer"))
    page = ViewerPage(_image(tmp_path), 200, 100, "1. report.pdf p. 3 · score 12.5 · ab12-p0003", boxes)
    record = ViewerRecord("Q?", "42", (), None, (page,), "out")
    html = write_viewer([record], tmp_path / "v.html", embed_images=True).read_text()
    assert "<figcaption>1. report.pdf p. 3 · score 12.5 · ab12-p0003" in html
    assert re.search(r'<figure class="page" id="(rec-0-p0)">.*href="#\1">enlarge</a>', html, flags=re.S)
    assert (
        html.count('class="box"') == 1
        and '<span class="num" style="background:#16a34a">1 · answer</span>' in html
    )
    assert "gold:" not in html  # no gold answers, no gold line
    with_gold = ViewerRecord("Q?", "42", ("42",), True, (page,))
    assert "gold: 42" in write_viewer([with_gold], tmp_path / "g.html").read_text()


def test_eval_viewer_opens_with_a_summary_and_filters(tmp_path: Path) -> None:
    page = Page("p1", _image(tmp_path), 200, 100, source="docs/report.pdf", page_number=2)
    samples = tuple(Sample(f"s{i}", f"Q{i}?", ("42",), pages=(page,)) for i in range(3))
    preds = (
        Prediction(sample_id="s0", texts=("a",), answer="42", scores={"anls": 1.0}),
        Prediction(sample_id="s1", texts=("b",), answer="41", scores={"anls": 0.0}),
        Prediction(sample_id="s2", texts=("c",), answer=None, scores={"anls": 0.0}),
    )
    row = ResultRow("bench", "coe", "tiny", 3, {"anls": 1 / 3})
    write_report([RunResult(row, samples, preds)], tmp_path / "out")
    html = (tmp_path / "out" / "viewer.html").read_text()
    summary = html.split('<table class="summary">', 1)[1].split("</table>", 1)[0]
    assert "<th>anls</th>" in summary and "<td>0.333</td><td>1</td><td>1</td><td>1</td>" in summary
    for name, n in (("all", 3), ("correct", 1), ("wrong", 1), ("unparsed", 1)):
        assert f'<label for="show-{name}">{name} ({n})</label>' in html
    assert re.findall(r'<div class="rec" data-outcome="(\w+)" id="rec-\d">', html) == [
        "correct",
        "wrong",
        "unparsed",
    ]
    assert "image 1: report.pdf p. 2 · p1" in html
    assert outcome(ViewerRecord("q", None, (), True, ())) == "unparsed"
