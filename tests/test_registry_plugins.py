"""A paper's parts are found by name before its method is imported: the registries of paradigms,
rewards and judge prompts load the modules named under the ``evidra.methods`` entry-point group on
their first miss, once; a plugin that fails to import costs one warning line, not the lookup."""

from __future__ import annotations

import logging
import subprocess
import sys
from importlib.metadata import EntryPoint

import pytest

from evidra.core import registry
from evidra.core.errors import RegistryError
from evidra.core.registry import Registry


def test_a_fresh_interpreter_finds_every_paper_paradigm_and_reward_by_name() -> None:
    code = (
        "import sys\n"
        "from evidra.paradigms import PARADIGMS\n"
        "from evidra.rewards import REWARDS\n"
        "assert 'evidra.methods.lat' not in sys.modules\n"
        "print(PARADIGMS.get('coe').__module__, REWARDS.get('cave') is not None, 'toolchain' in PARADIGMS)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["evidra.methods.lat.paradigm", "True", "True"]


def test_a_broken_plugin_is_one_warning_and_the_others_still_load(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shapes: Registry[int] = Registry("shape", plugins="evidra.test-plugins")
    points = [
        EntryPoint("broken", "no_such_module_for_evidra_tests", "evidra.test-plugins"),
        EntryPoint("square", "tests_plugin_square", "evidra.test-plugins"),
    ]
    monkeypatch.setattr(
        registry, "entry_points", lambda group: points if group == "evidra.test-plugins" else []
    )
    module = type(sys)("tests_plugin_square")
    module.__dict__["registered"] = shapes.add("square", 4)
    monkeypatch.setitem(sys.modules, "tests_plugin_square", module)
    shapes._items.clear()  # the module "registers" on import: emulate by adding on load below
    loaded: list[str] = []

    def load(self: EntryPoint) -> object:
        loaded.append(self.name)
        if self.name == "square":
            shapes.add("square", 4)
            return module
        raise ModuleNotFoundError(f"No module named {self.value!r}")

    monkeypatch.setattr(EntryPoint, "load", load)
    with caplog.at_level(logging.WARNING, logger="evidra.core.registry"):
        assert shapes.get("square") == 4
    assert loaded == ["broken", "square"]
    assert [r.getMessage() for r in caplog.records] == [
        "shape: plugin broken (no_such_module_for_evidra_tests) did not load: "
        "No module named 'no_such_module_for_evidra_tests'"
    ]
    with pytest.raises(RegistryError, match="unknown shape 'circle'"):
        shapes.get("circle")
    assert loaded == ["broken", "square"]  # loaded once, not on every miss


def test_a_plugin_that_looks_up_a_later_plugins_name_while_loading_finds_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    shapes: Registry[int] = Registry("shape", plugins="evidra.test-plugins")
    points = [
        EntryPoint("needs_square", "tests_plugin_needs_square", "evidra.test-plugins"),
        EntryPoint("square", "tests_plugin_square", "evidra.test-plugins"),
    ]
    monkeypatch.setattr(
        registry, "entry_points", lambda group: points if group == "evidra.test-plugins" else []
    )
    loaded: list[str] = []

    def load(self: EntryPoint) -> object:
        loaded.append(self.name)
        if self.name == "needs_square":  # like a method naming another method's judge prompt
            shapes.add("double_square", 2 * shapes.get("square"))
        else:
            shapes.add("square", 4)
        return None

    monkeypatch.setattr(EntryPoint, "load", load)
    with caplog.at_level(logging.WARNING, logger="evidra.core.registry"):
        assert shapes.get("double_square") == 8
    assert loaded == ["needs_square", "square"]  # each once, in the nested lookup's order
    assert caplog.records == []


def test_a_fresh_interpreter_finds_every_paper_judge_prompt_without_a_warning() -> None:
    code = (
        "import logging, sys\n"
        "logging.basicConfig(level=logging.WARNING)\n"
        "from evidra.rewards.judge_prompts import JUDGE_PROMPTS\n"
        "names = ('vragrl', 'lang2act', 'lang2act.eval', 'cave')\n"
        "print(' '.join(sorted(n for n in names if n in JUDGE_PROMPTS)))\n"
        "from evidra.methods import METHODS\n"
        "print(' '.join(sorted(METHODS.names())))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.splitlines()[0] == "cave lang2act lang2act.eval vragrl"
    assert {"lat", "evisrag", "lang2act", "vragrl", "cave"} <= set(out.stdout.splitlines()[1].split())
    assert "did not load" not in out.stderr, out.stderr
