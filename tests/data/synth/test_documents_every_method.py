"""``evidra eval --method NAME --synthetic documents`` runs for every registered method.

The generated pages carry the PDF's text layer, which LAT's offline step similarity and
VRAG-RL's BM25 search need: without it both refused evidra's own synthetic documents.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evidra.cli.main import main
from evidra.methods import METHODS

# options a method cannot run without (its error names them)
REQUIRED_OPTIONS = {"lang2act": ["--method-option", "stage=2"]}
# the reward components each method logs, as training names them
COMPONENTS = {
    "lat": {"accuracy", "step", "ground", "format"},
    "evisrag": {"perception", "derivation", "format"},
    "lang2act": {"answer", "format", "tool"},
    "vragrl": {"answer", "retrieval", "pattern"},
    "cave": {"accuracy", "format", "belief", "evidence", "focus"},
    "unidoc": {"answer", "retrieval", "select", "crop", "format"},
}


@pytest.mark.parametrize("method", METHODS.names())
def test_every_method_evaluates_on_synthetic_documents(
    tiny_dirs: dict[str, Path], tmp_path: Path, method: str
) -> None:
    out = tmp_path / "eval"
    model = ["--model", str(tiny_dirs["qwen2_5_vl"]), "--max-new-tokens", "8"]
    options = REQUIRED_OPTIONS.get(method, [])
    argv = [
        "eval",
        "--synthetic",
        "documents",
        "--n",
        "2",
        "--method",
        method,
        *options,
        *model,
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    (row,) = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]
    layout = METHODS.get(method).layout
    assert row["n"] == 2 and row["paradigm"] == f"{METHODS.get(method).paradigm}[method={method}]"
    assert "reward" in row["metrics"] and "exact_match" in row["metrics"]
    logged = {key.removeprefix("reward/") for key in row["metrics"] if key.startswith("reward/")}
    assert logged >= COMPONENTS.get(method, set()) and logged, logged
    assert (out / f"table_{layout}.csv").is_file()
