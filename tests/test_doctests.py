"""Every docstring example in ``src/evidra`` runs and prints what it shows."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import evidra

MODULES = sorted(m.name for m in pkgutil.walk_packages(evidra.__path__, prefix="evidra."))


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(
        module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False
    )
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} examples in {name} failed (output above)"
    )
