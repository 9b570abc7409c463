"""Imports point down: every module of ``src/evidra`` imports only from its own layer or the layers
below it, in the order ``docs/architecture.md`` writes down (its ``layers`` block, read here)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "evidra"
DOC = ROOT / "docs" / "architecture.md"
MODULES = sorted(PACKAGE.rglob("*.py"))
_BLOCK = re.compile(r"```layers\n(.*?)```", re.DOTALL)
_NAMED = re.compile(r"^evidra\.(\w+)")


def layers() -> dict[str, int]:
    """Top-level package or module -> its layer (0 is the bottom), from docs/architecture.md."""
    match = _BLOCK.search(DOC.read_text(encoding="utf-8"))
    assert match, f"{DOC} has no ```layers block"
    out: dict[str, int] = {}
    for rank, line in enumerate(line for line in match.group(1).splitlines() if line.strip()):
        for name in line.split():
            assert name not in out, f"{name} is named in two layers of {DOC.name}"
            out[name] = rank
    return out


def _imports(path: Path) -> set[str]:
    """Every ``evidra.<top>`` named by an import anywhere in the file (function bodies included),
    and by a string handed to ``importlib`` (a module that calls ``import_module``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    dynamic = "import_module(" in path.read_text(encoding="utf-8")
    out: set[str] = set()
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif dynamic and isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        out |= {m.group(1) for n in names if (m := _NAMED.match(n))}
    return out


def _top(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def test_the_scan_sees_function_level_and_importlib_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from evidra.rl.trainer import Trainer\n    import evidra.cli.main\n")
    assert _imports(probe) == {"rl", "cli"}
    probe.write_text("import importlib\nimportlib.import_module('evidra.methods.lat.method')\n")
    assert _imports(probe) == {"methods"}


def test_every_package_has_one_layer() -> None:
    named = layers()
    tops = {_top(p) for p in MODULES}
    assert len(MODULES) > 100 and "rewards" in tops  # the scan found the package
    unplaced, stale = sorted(tops - set(named)), sorted(set(named) - tops)
    assert not unplaced, f"place these in the layers block of {DOC.name}: {unplaced}"
    assert not stale, f"{DOC.name} names what src/evidra does not hold: {stale}"


def test_no_import_points_up() -> None:
    rank = layers()
    upward = [
        f"{path.relative_to(PACKAGE)} (layer {rank[_top(path)]}) imports evidra.{name} (layer {rank[name]})"
        for path in MODULES
        for name in sorted(_imports(path))
        if name in rank and rank[name] > rank[_top(path)]
    ]
    assert not upward, f"{len(upward)} upward imports:\n" + "\n".join(upward)


def test_the_order_keeps_the_trainer_and_the_methods_above_what_they_use() -> None:
    """The claims the layers exist for, so an edit of the block cannot quietly drop them."""
    rank = layers()
    below = [
        ("metrics", "rewards"),
        ("metrics", "eval"),
        ("rollout", "eval"),
        ("rollout", "data"),
        ("data", "eval"),
        ("eval", "rl"),
        ("rl", "methods"),
        ("methods", "cli"),
        ("models", "retrieval"),
        ("openai", "models"),
        ("retrieval", "rewards"),
        ("rewards", "paradigms"),
        ("paradigms", "methods"),
        ("data", "methods"),
        ("eval", "methods"),
        ("rl", "integrations"),
        ("methods", "integrations"),
    ]
    assert [(a, b) for a, b in below if not rank[a] < rank[b]] == []
