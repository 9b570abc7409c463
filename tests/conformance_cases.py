"""Conformance cases of the papers' released reward functions (``tests/fixtures/conformance``), for
every test folder (the root ``conftest.py`` takes its hooks and fixtures from here).

A test marked ``@pytest.mark.conformance("lat_accuracy_reward")`` that takes a ``case``
argument is run once per recorded case of that file; the ``conformance`` fixture returns the
whole file. The cases ship with the repository, so a missing file is a failure, not a skip.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest


def conformance_dir() -> Path:
    return Path(__file__).resolve().parent / "fixtures" / "conformance"


def _decode(value: Any) -> Any:
    """Undo the file format's encodings: non-finite floats are {"__float__": "nan"|"inf"|"-inf"}."""
    if isinstance(value, dict):
        if set(value) == {"__float__"}:
            return float(value["__float__"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def load_conformance(name: str) -> dict[str, Any]:
    """The decoded file ``<name>.json`` (it must exist)."""
    folder = conformance_dir()
    data: dict[str, Any] = _decode(json.loads((folder / f"{name}.json").read_text(encoding="utf-8")))
    return data


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "conformance(name): run once per case of tests/fixtures/conformance/<name>.json"
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("conformance")
    if marker is None or "case" not in metafunc.fixturenames:
        return
    name = marker.args[0]
    data = load_conformance(name)
    cases = data["cases"]
    metafunc.parametrize("case", cases, ids=[f"{name}-{i}" for i in range(len(cases))])


def same(got: Any, expected: Any) -> bool:
    """Recursive equality; numbers within 1e-12 (upstream float order is reproduced, not assumed)."""
    if isinstance(expected, bool) or isinstance(got, bool):
        return bool(got == expected)
    if isinstance(expected, (int, float)) and isinstance(got, (int, float)):
        return bool(got == pytest.approx(expected, rel=1e-12, abs=1e-12))
    if isinstance(expected, list) and isinstance(got, (list, tuple)):
        return len(got) == len(expected) and all(same(g, e) for g, e in zip(got, expected, strict=True))
    if isinstance(expected, dict) and isinstance(got, dict):
        return got.keys() == expected.keys() and all(same(got[k], expected[k]) for k in expected)
    return bool(got == expected)


@pytest.fixture(name="same")
def same_fixture() -> Callable[[Any, Any], bool]:
    """``same(got, expected)``: the comparison used to replay conformance outputs."""
    return same


@pytest.fixture
def conformance() -> Callable[[str], dict[str, Any]]:
    """Loader of a whole conformance file by name."""
    return load_conformance
