"""What the CLI prints around its results: no library warnings, no line twice, logs above the bars."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from evidra.cli._logging import DEEPSPEED_NOTICES, DropMessages, quiet_library_warnings
from evidra.cli._progress import LazyBar, PlainLines, open_bar, show_bars
from evidra.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


def _warn_from(module: str, category: type[Warning]) -> None:
    """Raise a warning as if from inside ``module`` (warnings are matched by the caller's name)."""
    code = compile(f"warnings.warn('from {module}', {category.__name__})", module, "exec")
    exec(code, {"__name__": module, "warnings": warnings, category.__name__: category})


def test_library_warnings_are_hidden_but_evidra_and_other_warnings_show() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_library_warnings()
        _warn_from("transformers.modeling_utils", FutureWarning)
        _warn_from("peft.tuners", DeprecationWarning)
        _warn_from("PIL.Image", UserWarning)  # any category from a quiet library
        _warn_from("torch.utils.checkpoint", UserWarning)
        _warn_from("evidra.corpus.pdf", UserWarning)
        _warn_from("qdrant_client.http", UserWarning)  # e.g. an API key over plain http: kept
        _warn_from("transformersx", UserWarning)  # only whole module names match
    assert [str(w.message) for w in caught] == [
        "from evidra.corpus.pdf",
        "from qdrant_client.http",
        "from transformersx",
    ]


def test_deepspeed_accelerator_notice_is_dropped() -> None:
    drop = DropMessages(DEEPSPEED_NOTICES)

    def record(msg: str) -> logging.LogRecord:
        return logging.LogRecord("DeepSpeed", logging.WARNING, __file__, 1, msg, None, None)

    assert not drop.filter(record("Setting accelerator to CPU. If you have GPU or other accelerator, ..."))
    assert drop.filter(record("ZeRO-3: parameter offload needs pinned memory"))


def screen_lines(text: str) -> list[str]:
    """The lines a terminal shows for ``text``: a carriage return rewrites its line from column 0,
    so a progress bar's many redraws leave one line."""
    lines = []
    for raw in text.split("\n"):
        shown: list[str] = []
        for piece in raw.split("\r"):
            shown[: len(piece)] = piece
        lines.append("".join(shown).rstrip())
    return [line for line in lines if line]


def test_screen_lines_keeps_what_a_terminal_shows() -> None:
    bar = "\rload:   0%|  | 0/2\rload:  50%|# | 1/2\rload: 100%|##| 2/2\n"
    cleared = "\rload:   0%|  | 0/2\r" + " " * 18 + "\rINFO x: hi\n"
    assert screen_lines(bar + cleared + "a\n\nb\n") == ["load: 100%|##| 2/2", "INFO x: hi", "a", "b"]


def test_hidden_bars_draw_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        show_bars(False)
        with open_bar(total=2, desc="hidden") as bar, LazyBar(total=3, desc="lazy") as lazy:
            bar.update(2)
            lazy(3)
            lazy.move_to(3, 3, pages=1)
        assert capsys.readouterr().err == ""
        show_bars(True)
        with open_bar(total=2, desc="shown") as bar:
            bar.update(2)
        assert capsys.readouterr().err.startswith("shown: 2/2 it (100%)")  # not a terminal: plain lines
    finally:
        show_bars(True)


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_plain_lines_write_each_tenth_and_the_end_with_rate_and_eta() -> None:
    out, clock = io.StringIO(), _Clock()
    with PlainLines("ingest", total=500, unit="page", file=out, every_s=1000, clock=clock) as bar:
        for _ in range(500):
            clock.now += 0.25  # 4 pages a second
            bar.update(1)
        bar.set_postfix({"loss": "0.5"})
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 10  # one per tenth; the last shows the end
    assert lines[0] == "ingest: 50/500 pages (10%), 4 pages/s, ETA 1m52s"  # 450 pages / 4 per second
    assert lines[-1] == "ingest: 500/500 pages (100%), 4 pages/s, in 2m05s"


def test_plain_lines_write_every_interval_without_a_total_and_close_with_the_count() -> None:
    out, clock = io.StringIO(), _Clock()
    bar = PlainLines("reading", unit="query", file=out, every_s=30, clock=clock)
    for _ in range(100):
        clock.now += 1.0
        bar.update(2)
    bar.close()
    bar.close()  # closing twice writes nothing more
    lines = out.getvalue().splitlines()
    assert lines == [
        "reading: 60 queries, 2 queries/s",
        "reading: 120 queries, 2 queries/s",
        "reading: 180 queries, 2 queries/s",
        "reading: 200 queries, 2 queries/s, in 1m40s",
    ]


def test_plain_lines_show_slow_steps_per_second_and_nothing_without_progress() -> None:
    out, clock = io.StringIO(), _Clock()
    with PlainLines("train rl", total=4, unit="step", initial=2, file=out, clock=clock) as bar:
        clock.now += 8.0
        bar.update(1)
        bar.set_postfix({"loss": "0.25"}, refresh=False)
    assert out.getvalue() == "train rl: 3/4 steps (75%), 8 s/step, ETA 8s\n"
    with PlainLines("idle", total=4, file=out, clock=clock):
        pass  # an error before any progress: its message prints alone
    assert out.getvalue().count("\n") == 1


def test_a_terminal_gets_the_redrawn_bar(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = io.StringIO()
    monkeypatch.setattr(tty, "isatty", lambda: True)
    monkeypatch.setattr(sys, "stderr", tty)
    with open_bar(total=2, desc="drawn") as bar:
        bar.update(2)
    assert "\r" in tty.getvalue() and "drawn: 100%|" in tty.getvalue()


def _bm25_eval_argv(tmp_path: Path, queries: int) -> list[str]:
    """``index eval`` of ``queries`` queries (alternately for each page) on a two-page BM25 index."""
    from PIL import Image

    from evidra.core.types import Box, Page, Word
    from evidra.retrieval.lifecycle.index_folder import build_index

    pages = []
    for pid, text in (("p1", "red square report"), ("p2", "blue bars chart")):
        Image.new("RGB", (64, 32), "white").save(tmp_path / f"{pid}.png")
        words = tuple(Word(w, Box(8.0 * j, 2.0, 8.0 * j + 6, 10.0)) for j, w in enumerate(text.split()))
        pages.append(Page(pid, str(tmp_path / f"{pid}.png"), 64, 32, words=words))
    build_index(pages, tmp_path / "idx", "bm25").close()
    asked = [("red report", "p1"), ("bars", "p2")]
    lines = [json.dumps({"_id": f"q{i}", "text": asked[i % 2][0]}) for i in range(queries)]
    (tmp_path / "q.jsonl").write_text("\n".join(lines) + "\n")
    qrels = "".join(f"q{i}\t{asked[i % 2][1]}\t1\n" for i in range(queries))
    (tmp_path / "r.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    files = ["--index", str(tmp_path / "idx"), "--queries", str(tmp_path / "q.jsonl")]
    return ["index", "eval", *files, "--qrels", str(tmp_path / "r.tsv"), "--json", "-k", "1"]


def test_quiet_hides_the_bar_that_the_default_shows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``index eval`` of two queries; -q first, so the default's bar proves -q does not stick."""
    argv = _bm25_eval_argv(tmp_path, 2)
    shown = {}
    for flags in (["-q"], [], ["-q"]):
        capsys.readouterr()
        assert main([*flags, *argv]) == 0
        out, err = capsys.readouterr()
        assert json.loads(out)["recall@1"] == 1.0  # both queries find their page first
        shown[bool(flags)] = screen_lines(err)
    assert shown[True] == []  # -q: nothing at all on stderr
    assert shown[False] and shown[False][-1].startswith("searching: 2/2 queries (100%)"), shown


def test_a_bar_on_a_pipe_writes_a_few_plain_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """stderr captured (not a terminal): a tenth of the queries per line at most, no redraws."""
    assert main(_bm25_eval_argv(tmp_path, 300)) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert "\r" not in err and 1 <= len(lines) <= 11, lines
    assert all(line.startswith("searching: ") for line in lines), lines
    assert lines[-1].startswith("searching: 300/300 queries (100%)"), lines


def _evidra(*args: str, cwd: Path) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "evidra.cli.main", *args], cwd=cwd, env=env, capture_output=True, timeout=300
    )
    out, err = proc.stdout.decode(), proc.stderr.decode()  # not text=True: that turns "\r" into "\n"
    assert proc.returncode == 0, err[-2000:]
    return out, err


@pytest.mark.slow
def test_a_tiny_run_prints_no_library_warning_and_no_line_twice(
    tmp_path: Path, tiny_dirs: dict[str, Path]
) -> None:
    """Fresh processes, as a user runs them: ingest, both index builds, ask, eval, a training step."""
    from evidra.data.synth.documents import generate_documents

    docs = generate_documents(tmp_path / "gen", n_docs=2, seed=3, dpi=50).docs_dir
    vl, col = str(tiny_dirs["qwen2_5_vl"]), str(tiny_dirs["colqwen2"])
    commands = [
        ["ingest", str(docs), "--store", "store", "--dpi", "50"],
        ["index", "build", "--store", "store", "--out", "bm25", "--encoder", "bm25"],
        ["index", "build", "--store", "store", "--out", "col", "--encoder", "colqwen2", "--model", col],
        [
            "ask",
            "--store",
            "store",
            "--index",
            "col",
            "--model",
            vl,
            "--max-new-tokens",
            "8",
            "--json",
            "--html",
            "a.html",
            "When was it founded?",
        ],
        [
            "eval",
            "--synthetic",
            "documents",
            "--paradigm",
            "coe",
            "--paradigm",
            "direct",
            "--model",
            vl,
            "--out",
            "res",
            "--limit",
            "2",
            "--max-new-tokens",
            "8",
        ],
        [
            "train",
            "sft",
            "--config",
            str(ROOT / "configs/tiny/lat.yaml"),
            "run.output_dir=sft",
            "data.size=2",
            "run.steps=1",
            "run.save_every=1",
        ],
    ]
    shown = []
    for command in commands:
        out, err = _evidra(*command, cwd=tmp_path)
        assert "Warning" not in err and "warnings.warn" not in err, f"{command[0]}: {err}"
        assert "\r" not in err, f"{command[0]} redrew a bar on a pipe: {err!r}"
        assert "WARNING" not in out, f"{command[0]} printed a log line on stdout: {out}"
        lines = screen_lines(err)
        assert len(lines) == len(set(lines)), f"{command[0]} printed a line twice: {lines}"
        repeated = [o for o in out.splitlines() if len(o) > 20 and any(o in e for e in lines)]
        assert not repeated, f"{command[0]} logged what it prints: {repeated}"
        shown.append(lines)
        if "--json" in command:
            assert json.loads(out)["question"] == command[-1]  # stdout holds the JSON alone
    ingest, bm25, col, _, evaluate, train = shown
    assert any(line.startswith("ingest: 2/2 files (100%)") and "pages=3" in line for line in ingest), ingest
    assert any(line.startswith("reading text: ") and "(100%)" in line for line in bm25), bm25
    assert any(line.startswith("embedding: ") and "(100%)" in line for line in col), col
    assert any(line.startswith("documents / coe: 2/2 q (100%)") for line in evaluate), evaluate
    assert any(line.startswith("train sft: 1/1 steps (100%)") and "loss=" in line for line in train), train
