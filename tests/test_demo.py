"""The demo: folder rules, the report of a given checkpoint (fast), the trained model's cited
boxes (slow: the full demo trains for about a minute), the report rendered in Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from markupsafe import escape
from PIL import Image

from evidra.cli.main import main
from evidra.core.errors import InvalidInputError
from evidra.demo.pipeline import MARKER, prepare_out_dir


def test_out_dir_is_fresh_or_cleared_on_request(tmp_path: Path) -> None:
    out = prepare_out_dir(tmp_path / "demo", overwrite=False)
    assert (out / MARKER).is_file()
    (out / "model").mkdir()
    with pytest.raises(InvalidInputError, match=r"demo'.*--overwrite"):
        prepare_out_dir(out, overwrite=False)
    prepare_out_dir(out, overwrite=True)
    assert sorted(p.name for p in out.iterdir()) == [MARKER]  # the earlier run's files are gone
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("keep")
    with pytest.raises(InvalidInputError, match="not a demo's"):
        prepare_out_dir(other, overwrite=True)
    assert (other / "notes.txt").read_text() == "keep"  # never cleared
    empty = tmp_path / "empty"
    empty.mkdir()
    assert (prepare_out_dir(empty, overwrite=False) / MARKER).is_file()


def test_second_run_into_the_same_folder_needs_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = prepare_out_dir(tmp_path / "demo", overwrite=False)
    (out / "train").mkdir()  # checkpoints of an earlier run
    assert main(["-q", "demo", "--out", str(out), "--arch", "qwen3_vl"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(out) in err and "--overwrite" in err


@pytest.fixture(scope="module")
def given_model_report(tiny_dirs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    from evidra.demo.pipeline import run_demo

    out = tmp_path_factory.mktemp("demo") / "given"  # short answers: the random model never stops
    run_demo(out, model=tiny_dirs["qwen2_5_vl"], n_docs=2, max_new_tokens=40)
    return out


def _report(out: Path) -> dict[str, Any]:
    report = json.loads((out / "report.json").read_text())
    summary, rows = report["summary"], report["questions"]
    assert summary["questions"] == len(rows) > 0 and summary["pages"] > 0
    assert any(not r["answerable"] for r in rows) and any(r["gold_boxes"] for r in rows)
    return report


def _check_images(out: Path) -> str:
    """Thumbnails are inside the HTML, every full-size page is a relative link into the folder."""
    html = (out / "report.html").read_text()
    assert html.count('<img src="data:image/png;base64,') >= 1
    links = re.findall(r'<img src="([^"]+)"', html)
    files = [src for src in links if not src.startswith("data:")]
    assert files and all(src.startswith("images/") and (out / src).is_file() for src in files)
    return html


def test_demo_with_a_given_model_trains_nothing(given_model_report: Path, tmp_path: Path) -> None:
    report = _report(given_model_report)
    summary, rows = report["summary"], report["questions"]
    assert summary["training"] is None and len(summary["answers"]) == 1
    name = summary["answers"][0]["name"]
    assert name.startswith("checkpoint ") and all(set(r["models"]) == {name} for r in rows)
    assert all(r["models"][name]["finish_reason"] in {"eos", "stop", "length"} for r in rows)
    assert not (given_model_report / "train").exists() and not (given_model_report / "model").exists()
    html = _check_images(given_model_report)
    assert "<svg" not in html and "used as given (no training)" in html
    assert str(escape(rows[0]["question"])) in html
    assert html.count('class="lb"') == sum(len(r["pages"]) for r in rows)  # a lightbox per page shown
    assert "<figcaption>image 1: doc_000.pdf p.1 " in html and "image N is the N-th of them" in html
    moved = tmp_path / "moved"
    shutil.copytree(given_model_report, moved)  # the folder works anywhere: links stay inside it
    _check_images(moved)


def test_box_tags_sit_outside_their_boxes_and_thumbnails_show_none(tmp_path: Path) -> None:
    """A tag goes above its box, below one at the page's top edge; thumbnails hide tags (CSS)."""
    from evidra.core.types import Box
    from evidra.eval.viewer import ViewerBox, ViewerPage, ViewerRecord, write_viewer

    Image.new("RGB", (100, 100), "white").save(tmp_path / "p.png")
    boxes = (ViewerBox(Box(10, 1, 50, 9), "top"), ViewerBox(Box(10, 50, 50, 60), "middle"))
    page = ViewerPage(str(tmp_path / "p.png"), 100, 100, "image 1: p.pdf p.1", boxes)
    html = write_viewer([ViewerRecord("q?", None, ("a",), None, (page,))], tmp_path / "r.html").read_text()
    tags = re.findall(r'<span class="(num[^"]*)"[^>]*>([^<]+)</span>', html)
    assert tags == [("num below", "top"), ("num", "middle")]
    assert ".thumb .page .num{display:none}" in html and ".pg:hover .num{opacity:0}" in html


def test_demo_refuses_a_missing_model_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    assert main(["-q", "demo", "--out", str(out), "--model", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err and not out.exists()


def _chromium() -> str | None:
    return shutil.which("chromium") or (
        str(Path("/usr/bin/chromium")) if Path("/usr/bin/chromium").exists() else None
    )


def test_report_renders_in_headless_chromium(given_model_report: Path, tmp_path: Path) -> None:
    binary = _chromium()
    if binary is None:
        pytest.skip(
            "chromium is not installed (Debian package 'chromium'); the report is checked only as text"
        )
    shot = tmp_path / "shot.png"
    flags = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
    flags += ["--disable-component-update", "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    url = (given_model_report / "report.html").resolve().as_uri()
    subprocess.run(
        [*flags, f"--screenshot={shot}", "--window-size=1200,1600", url],
        capture_output=True,
        timeout=90,
        check=True,
    )
    with Image.open(shot) as im:
        rgb = im.convert("RGB")
    colours = rgb.getcolors(maxcolors=1 << 20) or []
    assert len(colours) > 50  # text, page images and boxes, not a blank page
    assert any(
        abs(r - 22) < 12 and abs(g - 163) < 20 and abs(b - 74) < 20 for _, (r, g, b) in colours
    )  # gold


@pytest.mark.slow
def test_the_trained_model_cites_boxes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo"
    assert main(["-q", "demo", "--out", str(out)]) == 0
    report = _report(out)
    training = report["summary"]["training"]
    assert len(training["sft_loss"]) == 200 and training["sft_loss"][-1] < training["sft_loss"][0]
    assert set(training["held_out"]) == {"before", "after_sft", "after_rl"}
    before = [r["models"]["before training"] for r in report["questions"]]
    after = [r["models"]["after training"] for r in report["questions"]]

    def cited(answers: list[dict[str, Any]]) -> int:  # a box, and nothing else in the answer broken
        return sum(a["answer_box"] is not None and not a["parse_errors"] for a in answers)

    # The untrained model cites no box that parses; the trained one does. How many of the 11 varies
    # with the float arithmetic of the machine's kernels (seen: 4 and 5 of 11 with other kernels or
    # another seed, more here), so the bar is a third, which no untrained or broken trainer clears.
    assert cited(before) == 0
    assert cited(after) >= len(after) // 3
    assert sum(a["correct"] for a in after) >= 1
    html = _check_images(out)
    assert 'cited by the answer"' in html and "<svg" not in html  # alone, or joined to a step's box
    assert html.count('<img src="data:image/png;base64,') >= 3 + len(after)  # charts + thumbnails
    phases = ["before training", "after SFT", "after RL"]
    held = report["held_out_questions"]  # new documents, answered at each phase
    assert len(held) == 3 and all(r["gold_boxes"] and list(r["models"]) == phases for r in held)
    assert not {p for r in held for p in r["pages"]} & {p for r in report["questions"] for p in r["pages"]}
    section = html[html.index(">Held-out pages: ") : html.index(">Training questions: learned by heart<")]
    assert all(section.count(f"<h4>{phase}</h4>") == len(held) for phase in phases)
    pages_shown = sum(len(r["pages"]) for r in held) * len(phases)
    assert section.count('<figure class="page">') == pages_shown
    assert section.count('title="gold answer"') >= 2 * len(phases) * len(held)  # thumbnail + enlarged
    assert [s["name"] for s in report["summary"]["held_out"]] == phases
    printed = capsys.readouterr().out
    assert "after training:" in printed and "held-out LAT reward: before" in printed
    assert "held-out pages after RL:" in printed
    # another architecture into the same folder: refused without --overwrite, run from scratch with it
    again = ["-q", "demo", "--out", str(out), "--arch", "qwen3_vl", "--docs", "2", "--sft-steps", "4"]
    assert main([*again, "--rl-steps", "1"]) == 2
    assert main([*again, "--rl-steps", "1", "--overwrite"]) == 0
    summary = _report(out)["summary"]
    assert "qwen3_vl" in summary["model"] and summary["training"]["sft_steps"] == 4


def _held_out_report(tmp_path: Path) -> str:
    """A report of one training question and two held-out questions, answered at three phases:
    no answer, an answer without a box, a training question's answer citing a box."""
    from evidra.core.types import Box, EvidenceBox, Page, Parsed, Sample
    from evidra.demo.summary import HeldOutPages, ModelAnswers, write_demo_report

    Image.new("RGB", (200, 100), "white").save(tmp_path / "p.png")

    def sample(name: str, gold: str) -> Sample:
        page = Page(f"{name}-p1", str(tmp_path / "p.png"), 200, 100, source=f"{name}.pdf", page_number=1)
        boxes = (EvidenceBox(page.id, Box(10, 10, 50, 30)),)
        return Sample(
            name, f"{name} question?", (gold,), pages=(page,), gold_pages=(page.id,), gold_boxes=boxes
        )

    trained, held = sample("trained", "42"), (sample("new0", "9"), sample("new1", "9"))
    # after RL: the training question's answer, citing a box that is not the gold one
    cited = Parsed("<answer>42</answer>", "42", answer_box=Box(100, 40, 150, 80), answer_page=0)
    phases = (
        (Parsed("zzz", errors=("no <answer> tag",)), "before training"),
        (Parsed("<answer>7</answer>", "7"), "after SFT"),
        (cited, "after RL"),
    )
    answers = tuple(ModelAnswers(name, (p, p), (False, False), ("stop", "stop")) for p, name in phases)
    recalled = ModelAnswers("after training", (Parsed("<answer>42</answer>", "42"),), (True,), ("stop",))
    path = write_demo_report(
        tmp_path / "report.html",
        [trained],
        [recalled],
        {},
        model_name="tiny",
        training=None,
        given_model=False,
        held_out=HeldOutPages(held, answers, measured=8),
    )
    return path.read_text()


def test_report_shows_held_out_pages_at_each_phase_before_the_trained_questions(tmp_path: Path) -> None:
    html = _held_out_report(tmp_path)
    held_at, trained_at = (
        html.index(">Held-out pages: "),
        html.index(">Training questions: learned by heart<"),
    )
    held, trained = html[held_at:trained_at], html[trained_at:]
    assert "new0 question?" in held and "new1 question?" in held and "new0" not in trained
    for phase in ("before training", "after SFT", "after RL"):  # one answer per phase per page
        assert held.count(f"<h4>{phase}</h4>") == 2
    assert held.count("(no answer parsed)") == 2 and held.count("format errors: no &lt;answer&gt; tag") == 2
    assert held.count("well-formed: no") == 2 and held.count("well-formed: yes") == 2 * 2
    assert "answered greedily before training, after SFT and after RL:" in held
    # every page of every phase shown (a thumbnail and its enlarged view, each with the boxes):
    # the gold box on each, the answer's box where it cites one (after RL only)
    assert held.count('<figure class="page">') == 6 and held.count('class="lb"') == 6
    assert held.count('title="gold answer"') == 2 * 6
    assert held.count('title="cited by the answer"') == 2 * 2
    assert "Measured after RL: 2 of 2 answers are well-formed, 2 cite a box," in held
    assert "0 are correct and 2 repeat the answer of a training question" in held
    assert "cannot yet read a page it has not seen: it answers with what it learned" in held
    assert "other 6 held-out questions" in held
    assert "trained question?" in trained and "recalled from training, not read from the page" in trained
    assert trained.count('<figure class="page">') == 1 and trained.count('title="gold answer"') == 2


def test_held_out_questions_shown_are_answerable_and_distinct() -> None:
    from evidra.core.types import Box, EvidenceBox, Sample
    from evidra.demo.pipeline import _first_answerable

    def sample(name: str, answerable: bool = True) -> Sample:
        gold = (EvidenceBox("p", Box(0, 0, 1, 1)),) if answerable else ()
        return Sample(name, "?", gold_boxes=gold, answerable=answerable)

    held = [sample("a"), sample("none", False), sample("a"), sample("b"), sample("c"), sample("d")]
    assert _first_answerable(held, 3) == [0, 3, 4]  # the repeat of "a" and the unanswerable one skipped
    assert _first_answerable(held[:2], 3) == [0]
