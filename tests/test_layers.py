"""Imports point down: the layers below the trainer never import it, and the rollout loop sits below
evaluation and data construction (which roll out a policy the way training does)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "evidra"
# what may import the trainer: the CLI, the framework adapters, the top-level conveniences (demo,
# RAG) and rl itself
ABOVE_RL = {"cli", "rl", "methods", "integrations", "demo", "rag", "__init__"}
# what may import the paper methods: the CLI, the framework adapters (a method's reward for another
# trainer), the top-level conveniences and the methods themselves; the trainer is handed a Task and
# never asks for a method
ABOVE_METHODS = {"cli", "methods", "integrations", "demo", "rag", "__init__"}
# the rollout loop uses models, environments and types only
BELOW_EVAL = {"rollout": {"eval", "data", "rl", "cli", "methods"}}


def _imports(path: Path) -> set[str]:
    """Every ``evidra.<top>`` named by an import anywhere in the file, function bodies included."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names: list[str] = []
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        out |= {n.split(".")[1] for n in names if n.startswith("evidra.")}
    return out


def _layer(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_scan_sees_function_level_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from evidra.rl.trainer import Trainer\n    import evidra.cli.main\n")
    assert _imports(probe) == {"rl", "cli"}


def test_no_layer_below_the_trainer_imports_it() -> None:
    upward = [
        f"{path.relative_to(PACKAGE)} imports evidra.{name}"
        for path in MODULES
        if _layer(path) not in ABOVE_RL
        for name in sorted(_imports(path) & {"rl", "cli", "methods"})
    ]
    assert len(MODULES) > 100  # the scan found the package
    assert not upward, "\n".join(upward)


def test_nothing_below_the_methods_imports_them() -> None:
    upward = [
        f"{path.relative_to(PACKAGE)} imports evidra.{name}"
        for path in MODULES
        if _layer(path) not in ABOVE_METHODS
        for name in sorted(_imports(path) & {"methods", "cli"})
    ]
    assert any(_layer(p) == "methods" for p in MODULES)  # the scan found the methods package
    assert not upward, "\n".join(upward)


def test_the_rl_package_loads_no_module_by_name() -> None:
    """rl/ reaches no method through importlib (an import by name would hide from the scan above)."""
    for path in (PACKAGE / "rl").rglob("*.py"):
        assert "import_module(" not in path.read_text(encoding="utf-8"), path


def test_the_rollout_loop_sits_below_eval_and_data() -> None:
    for path in (PACKAGE / "rollout").rglob("*.py"):
        assert not _imports(path) & BELOW_EVAL["rollout"], path
