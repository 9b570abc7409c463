"""Task registrations of the papers' methods, one module per method.

Every module in this package is imported the first time ``evidra.rl.tasks.TASKS`` is asked for
a task it does not hold yet, so a method's tasks are registered by adding its file here.
"""

from __future__ import annotations

import importlib
import pkgutil


def load_all() -> None:
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
