"""Every subcommand's help: each option explained with its default, two or three examples that
parse; -q anywhere; errors named by the full subcommand."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

import pytest

from evidra.cli._help import EXAMPLES, subparsers
from evidra.cli.main import build_parser, main

PARSER = build_parser()
LEAVES = [
    p for p in subparsers(PARSER) if not any(isinstance(a, argparse._SubParsersAction) for a in p._actions)
]


def _options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    return [a for a in p._actions if not isinstance(a, argparse._SubParsersAction | argparse._HelpAction)]


@pytest.mark.parametrize("sub", LEAVES, ids=lambda p: p.prog)
def test_every_option_has_help_and_shows_its_default(sub: argparse.ArgumentParser) -> None:
    text = sub.format_help().split("\noptions:\n", 1)[1]  # past the usage lines
    for action in _options(sub):
        assert action.help, f"{sub.prog} {action.option_strings or action.dest} has no help"
        trivial = action.default in (None, False, "", [], (), argparse.SUPPRESS)
        if action.option_strings and not trivial:
            flag = action.option_strings[-1]
            block = text.split(f"{flag}", 1)[1].split("\n  -", 1)[0]  # the option's own lines
            assert "default" in block, f"{sub.prog} {flag} does not show its default {action.default!r}"


@pytest.mark.parametrize("sub", LEAVES, ids=lambda p: p.prog)
def test_every_help_ends_with_examples_that_parse(sub: argparse.ArgumentParser) -> None:
    name = sub.prog.removeprefix("evidra ")
    assert 2 <= len(EXAMPLES[name]) <= 3, name
    assert sub.format_help().rstrip().endswith(EXAMPLES[name][-1])
    for example in EXAMPLES[name]:
        argv = shlex.split(example.split("evidra.cli.main ", 1)[-1].removeprefix("evidra "))
        args, extra = PARSER.parse_known_args(argv)
        assert args.command_path == sub.prog, example
        assert all("=" in e for e in extra), example


def test_train_modes_have_their_own_help() -> None:
    sft, rl = (
        PARSER._subparsers._group_actions[0].choices["train"]._subparsers._group_actions[0].choices[m]  # type: ignore[union-attr]
        for m in ("sft", "rl")
    )
    assert sft.format_help() != rl.format_help()
    assert "Supervised fine-tuning" in sft.format_help() and "Reinforcement learning" in rl.format_help()
    args = PARSER.parse_args(["train", "rl", "--config", "c.yaml", "a.b=1"])
    assert (args.mode, args.config, args.overrides) == ("rl", "c.yaml", ["a.b=1"])


def test_quiet_after_the_subcommand_and_full_names_in_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert PARSER.parse_args(["pages", "S", "-q"]).quiet is True
    assert PARSER.parse_args(["-q", "pages", "S"]).quiet is True
    assert PARSER.parse_args(["pages", "S"]).quiet is False
    assert main(["index", "search", "--index", str(tmp_path / "none"), "-q", "query"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("evidra index search: error: ") and err.count("\n") == 1


def test_method_module_before_and_after_the_subcommand_repeats() -> None:
    args = PARSER.parse_args(
        ["--method-module", "a.b", "pages", "S", "--method-module", "c", "--method-module", "d"]
    )
    assert args.method_module == ["a.b"] and args.method_module_after == ["c", "d"]
    assert PARSER.parse_args(["pages", "S"]).method_module == []
    assert "--method-module MODULE" in PARSER.format_help()
