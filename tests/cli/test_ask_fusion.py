"""``evidra ask``'s hybrid-search options: parsed into a ``Fusion``, refused in one line when wrong.

No model or index is loaded: the options are checked before anything opens."""

from __future__ import annotations

import pytest

from evidra.cli.ask import fusion_from_args
from evidra.cli.main import build_parser, main
from evidra.retrieval.hybrid import Fusion

ASK = ["ask", "--store", "no-store", "--model", "tiny:qwen2_5_vl"]


def _fusion(*extra: str) -> Fusion | None:
    return fusion_from_args(build_parser().parse_args([*ASK, *extra, "Q?"]))


def test_options_become_a_fusion() -> None:
    two = ["--index", "a", "--index", "b"]
    assert _fusion(*two) is None  # nothing said: attach's default
    assert _fusion(*two, "--fusion", "rrf", "--rrf-k", "10") == Fusion("rrf", 100, None, 10)
    weighted = _fusion(*two, "--fusion-weight", "1", "--fusion-weight", "0.5", "--fusion-depth", "20")
    assert weighted == Fusion("zscore", 20, (1.0, 0.5), 60)
    assert _fusion(*two, "--fusion", "minmax") == Fusion("minmax")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--index", "a", "--fusion", "rrf"], ["--fusion apply to two or more --index (got 1)"]),
        (["--rrf-k", "5"], ["--rrf-k apply to two or more --index (got 0)"]),
        (["--index", "a", "--index", "b", "--rrf-k", "5"], ["--rrf-k is the constant of --fusion rrf"]),
        (["--index", "a", "--index", "b", "--fusion-weight", "1"], ["got 1 --fusion-weight for 2 --index"]),
        (["--index", "a", "--index", "b", "--fusion-depth", "0"], ["fusion depth must be", "got 0"]),
        (["--index", "a", "--index", "b", "--fusion", "rrf", "--rrf-k", "-1"], ["RRF k must be", "-1"]),
        (["--index", "a", "--index", "b", "--fusion-weight", "1", "--fusion-weight", "-2"], [">= 0"]),
    ],
)
def test_bad_options_get_one_line(
    extra: list[str], words: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*ASK, *extra, "Q?"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("evidra ask: error: "), err
    assert all(w in err for w in words), err


def test_an_unknown_rule_names_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([*ASK, "--index", "a", "--index", "b", "--fusion", "zscroe", "Q?"])
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--fusion: invalid choice: 'zscroe'" in last and "'zscore'" in last


def test_help_shows_every_default(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for shown in ("(default: zscore)", "(default: 100)", "(default: 1 each)", "(default: 60)"):
        assert shown in out
