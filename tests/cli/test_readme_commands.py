"""Every ``evidra`` command shown in the README and the docs parses with the real CLI parser."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from evidra.cli.main import build_parser

ROOT = Path(__file__).parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def shown_commands(text: str) -> list[str]:
    """The ``evidra ...`` lines of fenced code blocks, continuation lines joined, comments cut."""
    commands = []
    for block in re.findall(r"```(?:bash|sh)?\n(.*?)```", text, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split(" #", 1)[0].strip()
            if line.startswith("evidra ") or "-m evidra.cli.main " in line:
                commands.append(line.split("evidra.cli.main ", 1)[-1].removeprefix("evidra "))
    return commands


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_documented_commands_parse(doc: Path) -> None:
    parser = build_parser()
    for command in shown_commands(doc.read_text()):
        argv = shlex.split(command)
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as exc:
            raise AssertionError(f"{doc.name}: `evidra {command}` does not parse") from exc
        assert args.command == argv[0], command
        assert all("=" in e and hasattr(args, "overrides") for e in extra), f"{doc.name}: {command}: {extra}"


def test_the_readme_shows_export_and_eval_of_a_run() -> None:
    commands = shown_commands((ROOT / "README.md").read_text())
    assert any(c.startswith("export runs/") for c in commands)
    assert any(c.startswith("eval ") and "--model runs/" in c for c in commands)
