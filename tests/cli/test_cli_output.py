"""What the CLI prints around its results: no library warnings, no line twice, logs above the bars."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from evidra.cli._logging import DEEPSPEED_NOTICES, DropMessages, quiet_library_warnings

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


def _evidra(*args: str, cwd: Path) -> tuple[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "evidra.cli.main", *args], cwd=cwd, env=env,
                          capture_output=True, timeout=300)  # fmt: skip
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
        ["ask", "--store", "store", "--index", "col", "--model", vl, "--max-new-tokens", "8", "--json",
         "--html", "a.html", "When was it founded?"],
        ["eval", "--synthetic", "documents", "--paradigm", "coe", "--paradigm", "direct", "--model", vl,
         "--out", "res", "--limit", "2", "--max-new-tokens", "8"],
        ["train", "sft", "--config", str(ROOT / "configs/tiny/lat.yaml"), "run.output_dir=sft", "data.size=2",
         "run.steps=1", "run.save_every=1"],
    ]  # fmt: skip
    shown = []
    for command in commands:
        out, err = _evidra(*command, cwd=tmp_path)
        assert "Warning" not in err and "warnings.warn" not in err, f"{command[0]}: {err}"
        assert "WARNING" not in out, f"{command[0]} printed a log line on stdout: {out}"
        lines = screen_lines(err)
        assert len(lines) == len(set(lines)), f"{command[0]} printed a line twice: {lines}"
        repeated = [o for o in out.splitlines() if len(o) > 20 and any(o in e for e in lines)]
        assert not repeated, f"{command[0]} logged what it prints: {repeated}"
        shown.append(lines)
        if "--json" in command:
            assert json.loads(out)["question"] == command[-1]  # stdout holds the JSON alone
    ingest, bm25, col, _, evaluate, train = shown
    assert any(line.startswith("ingest: 100%") and "pages=3" in line for line in ingest), ingest
    assert any(line.startswith("reading text: 100%") for line in bm25), bm25
    assert any(line.startswith("embedding: 100%") for line in col), col
    assert any(line.startswith("documents / coe: 100%") for line in evaluate), evaluate
    assert any(line.startswith("train sft: 100%") for line in train), train
