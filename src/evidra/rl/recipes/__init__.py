"""Task registrations of the papers' methods, one module per method.

Every module in this package is imported when ``evidra.rl.tasks`` is, so a method's tasks are
registered in ``TASKS`` by adding its file here; nothing else needs editing.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
