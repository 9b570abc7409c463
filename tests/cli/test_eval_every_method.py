"""``evidra eval --method NAME --synthetic documents`` answers with every registered method on the
tiny model (Lang2Act with its stage, which it cannot do without), and a method's option errors
are said in the command's own spelling."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.methods import METHODS

OPTIONS = {"lang2act": ["--method-option", "stage=2"]}  # a method's options it has no default for


def _eval(model: Path, out: Path, method: str, *options: str) -> int:
    argv = ["-q", "eval", "--synthetic", "documents", "--n", "1", "--method", method, *options]
    return main([*argv, "--model", str(model), "--max-new-tokens", "8", "--out", str(out)])


def test_every_method_is_covered() -> None:
    assert {"lat", "evisrag", "lang2act", "vragrl", "cave", "unidoc"} <= set(METHODS.names())


@pytest.mark.slow
@pytest.mark.parametrize("method", ["lat", "evisrag", "lang2act", "vragrl", "cave", "unidoc"])
def test_eval_answers_with_every_method(tiny_dirs: dict[str, Path], tmp_path: Path, method: str) -> None:
    assert _eval(tiny_dirs["qwen2_5_vl"], tmp_path, method, *OPTIONS.get(method, [])) == 0
    (row,) = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["n"] == 1 and row["paradigm"].endswith(f"[method={method}]") and "reward" in row["metrics"]


def test_a_method_option_error_names_the_eval_option(
    tiny_dirs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _eval(tiny_dirs["qwen2_5_vl"], tmp_path, "lang2act") != 0
    err = capsys.readouterr().err.strip().splitlines()
    expected = "--method-option stage must be 1 or 2 for lang2act, got 0; set --method-option stage=1|2"
    assert err == [f"evidra eval: error: {expected}"]
    assert not (tmp_path / "results.jsonl").exists()
