"""A paper reads as one folder: ``methods/<paper>/`` holds its method, paradigm and reward, and the
shared packages below hold nothing named for one paper."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from evidra.methods import METHODS

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "evidra"
PAPERS = ("lat", "evisrag", "lang2act", "vragrl", "cave", "unidoc")
SHARED = ("rewards", "paradigms", "metrics", "env", "rollout", "eval", "rl")


@pytest.mark.parametrize("paper", PAPERS)
def test_each_paper_has_its_method_and_reward_in_its_folder(paper: str) -> None:
    folder = PACKAGE / "methods" / paper
    assert (folder / "method.py").is_file() and (folder / "reward.py").is_file()
    method = METHODS.get(paper)
    assert method.build.__module__ == f"evidra.methods.{paper}.method"


@pytest.mark.parametrize("paper", ["lat", "evisrag", "lang2act", "cave", "unidoc"])
def test_a_paper_with_its_own_output_format_keeps_its_parser_in_its_folder(paper: str) -> None:
    from evidra.paradigms import PARADIGMS

    paradigm = PARADIGMS.get(METHODS.get(paper).paradigm)
    module = paradigm.__module__ if isinstance(paradigm, type) else type(paradigm).__module__
    assert module == f"evidra.methods.{paper}.paradigm"


def test_the_shared_packages_hold_nothing_named_for_one_paper() -> None:
    named = [
        str(path.relative_to(PACKAGE))
        for package in SHARED
        for path in (PACKAGE / package).rglob("*.py")
        if set(path.stem.split("_")) & set(PAPERS)
    ]
    assert named == [], f"move these into their paper's folder under methods/: {named}"


def test_no_shared_package_imports_a_paper() -> None:
    """What is below ``methods`` cannot know a paper; it is handed one (a paradigm, a reward)."""
    found = []
    for package in (*SHARED, "data", "models", "retrieval", "corpus", "core"):
        for path in (PACKAGE / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            rel = path.relative_to(PACKAGE)
            found += [f"{rel} -> {p}" for p in PAPERS if f"from evidra.methods.{p}" in text]
    assert found == []


def test_importing_a_paper_folder_registers_its_method() -> None:
    module = importlib.import_module("evidra.methods.cave")
    assert module.method.CAVE is METHODS.get("cave")
