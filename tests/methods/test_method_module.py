"""``--method-module``: the command line loads a method from a module of the user's own, not
packaged; a module that cannot be imported, and a method nobody loaded, are one line saying so."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from evidra.cli.main import main
from evidra.methods import METHODS

ROOT = Path(__file__).resolve().parents[2]

MODULE = """
from dataclasses import dataclass

from evidra.methods import api


@dataclass(frozen=True)
class Options:
    max_words: int = 8


def build(options: Options, resources: api.Resources) -> api.Task:
    raise api.ConfigError(f"tmp_words built with max_words={options.max_words}")


api.METHODS.add("tmp_words", api.Method(name="tmp_words", options=Options, build=build, paradigm="direct"))
"""


@pytest.fixture
def own_modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A folder on ``sys.path`` for the test's modules; the methods they register and the
    modules themselves are gone after the test."""
    folder = tmp_path / "mods"
    (folder / "my_pkg").mkdir(parents=True)
    (folder / "my_pkg" / "__init__.py").write_text("")
    (folder / "my_pkg" / "my_method.py").write_text(MODULE)
    (folder / "my_pkg" / "broken.py").write_text("import not_a_module_anywhere_xyz\n")
    (folder / "my_pkg" / "typo.py").write_text("def f(:\n")
    monkeypatch.syspath_prepend(str(folder))
    METHODS.names()  # the process's registry loaded first, so the one restored after the test is whole
    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    yield folder
    for name in [m for m in sys.modules if m == "my_pkg" or m.startswith("my_pkg.")]:
        del sys.modules[name]


def _recipe(tmp_path: Path, method: dict[str, object]) -> str:
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"method": method, "model": {"path": "x"}}))
    return str(path)


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_module_named_on_the_command_line_gives_its_method(
    own_modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recipe = _recipe(tmp_path, {"name": "tmp_words", "max_words": 3})
    # the method is found and its options read: its builder ran with them
    assert main(["--method-module", "my_pkg.my_method", "train", "rl", "--config", recipe]) == 2
    assert "tmp_words built with max_words=3" in _error(capsys)
    # after the subcommand too, and an option the method does not have is named with its fix
    typo = _recipe(tmp_path, {"name": "tmp_words", "max_word": 3})
    assert main(["train", "rl", "--config", typo, "--method-module", "my_pkg.my_method"]) == 2
    assert "method.max_word is no option of method 'tmp_words'; did you mean 'max_words'?" in _error(capsys)


def test_an_unknown_method_says_how_to_load_one(
    own_modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["train", "rl", "--config", _recipe(tmp_path, {"name": "tmp_words"})]) == 2
    line = _error(capsys)
    assert "unknown method 'tmp_words'" in line
    assert "a method defined in your own module is loaded with --method-module my_pkg.my_method" in line
    assert main(["train", "rl", "--config", _recipe(tmp_path, {"name": "latt"})]) == 2
    assert "unknown method 'latt' (did you mean 'lat'?); a method defined" in _error(capsys)


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (
            "my_pkg.broken",
            "--method-module 'my_pkg.broken' cannot be imported: ModuleNotFoundError: "
            "No module named 'not_a_module_anywhere_xyz'",
        ),
        ("my_pkg.missing", "--method-module 'my_pkg.missing' cannot be imported: ModuleNotFoundError"),
        ("my_pkg.typo", "--method-module 'my_pkg.typo' cannot be imported: SyntaxError"),
        ("my_pkg/my_method.py", "--method-module 'my_pkg/my_method.py' is not a module name"),
    ],
)
def test_a_module_that_does_not_import_is_one_line_naming_it(
    own_modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], module: str, message: str
) -> None:
    recipe = _recipe(tmp_path, {"name": "lat"})
    assert main(["--method-module", module, "train", "rl", "--config", recipe]) == 2
    assert message in _error(capsys)


def test_a_recipe_cannot_name_a_module(
    own_modules: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Importing runs code: only the command line names a module, never a recipe."""
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({"method_modules": ["my_pkg.my_method"], "method": {"name": "tmp_words"}}))
    assert main(["train", "rl", "--config", str(path)]) == 2
    assert "unknown config key 'method_modules'" in _error(capsys)
    assert "my_pkg.my_method" not in sys.modules


@pytest.mark.slow
def test_the_example_method_trains_a_step_through_method_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``examples/short_answer.py``, written with ``evidra.methods.api`` alone, trains one RL
    step on the tiny model when the command line names its module."""
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    METHODS.names()
    monkeypatch.setattr(METHODS, "_items", dict(METHODS._items))
    monkeypatch.delitem(sys.modules, "short_answer", raising=False)
    recipe = {
        "method": {"name": "short_answer", "max_words": 6},
        "model": {"path": "tiny:qwen2_5_vl", "min_pixels": 3136, "max_pixels": 50176},
        "data": {"size": 2, "path": str(tmp_path / "data")},
        "rollout": {"group_size": 2, "max_new_tokens": 8, "max_response_tokens": 24},
        "run": {"output_dir": str(tmp_path / "rl"), "steps": 1, "batch_size": 2, "micro_batch_size": 2},
    }
    path = tmp_path / "short_answer.yaml"
    path.write_text(yaml.safe_dump(recipe))
    try:
        assert main(["-q", "train", "rl", "--method-module", "short_answer", "--config", str(path)]) == 0
    finally:
        sys.modules.pop("short_answer", None)
    rows = (tmp_path / "rl" / "metrics.jsonl").read_text().splitlines()
    assert len(rows) == 1 and '"reward/answer"' in rows[0]
