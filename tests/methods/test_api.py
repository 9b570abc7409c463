"""``evidra.methods.api``: one import holds what a method written outside evidra needs; the
example method (``examples/short_answer.py``) is written with it alone and registers."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path
from typing import Any

import pytest

from evidra.methods import METHODS, api
from evidra.rl.run_config import DataConfig

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "short_answer.py"


def test_every_name_of_the_api_resolves() -> None:
    assert len(api.__all__) == len(set(api.__all__))
    for name in api.__all__:
        assert getattr(api, name) is not None, name
    # the pieces every method is built from
    needed = {"Method", "METHODS", "Resources", "Task", "Sample", "Parsed", "RewardResult", "ConfigError"}
    assert needed <= set(api.__all__)
    assert api.METHODS is METHODS  # the registry the commands read, not a copy


def _evidra_imports(path: Path) -> list[str]:
    """The import statements of ``path`` that name an evidra module, as written."""
    tree = ast.parse(path.read_text())
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("evidra"):
            lines.append(f"from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import) and any(a.name.startswith("evidra") for a in node.names):
            lines.append(f"import {', '.join(a.name for a in node.names)}")
    return lines


def test_the_example_method_imports_evidra_once() -> None:
    assert _evidra_imports(EXAMPLE) == ["from evidra.methods import api"]


@pytest.fixture
def example(monkeypatch: pytest.MonkeyPatch) -> Any:
    """``examples/short_answer.py`` imported afresh into a registry of this test's own."""
    METHODS.names()  # the process's registry loaded first, so the one restored after the test is whole
    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.syspath_prepend(str(EXAMPLE.parent))
    monkeypatch.delitem(sys.modules, "short_answer", raising=False)
    module = importlib.import_module("short_answer")
    yield module
    sys.modules.pop("short_answer", None)


def test_the_example_registers_and_scores_its_oracle(example: Any, tmp_path: Path) -> None:
    method = api.METHODS.get("short_answer")
    assert method is example.SHORT_ANSWER and method.paradigm == "direct"
    task = method.task({"max_words": 6})
    sample = next(s for s in task.samples(DataConfig(size=4, path=str(tmp_path))) if s.answers)
    assert task.oracle is not None
    result = task.reward(task.parse(task.oracle(sample)[-1].plain_text), sample, None)
    # exact answer (1.0 x 1.0) + well-formed (1.0 x 0.2)
    assert result.total == pytest.approx(1.2)
    assert dict(result.components) == {"answer": 1.0, "format": 1.0}
