"""One error hierarchy for the whole library.

Every message names the offending value and says how to fix it. Model output that fails to
parse is never an exception: parsers return ``Parsed`` with ``errors`` filled in.
"""

from __future__ import annotations


class EvidraError(Exception):
    """Base class of every error evidra raises on purpose."""


class InvalidInputError(EvidraError, ValueError):
    """A value given by the caller (argument, record, file content) is not acceptable."""


class ConfigError(EvidraError, ValueError):
    """A configuration file or override is malformed, or names an unknown key."""


class RegistryError(EvidraError, KeyError):
    """A name was looked up in a registry that does not hold it."""

    def __str__(self) -> str:  # KeyError quotes its message; we want it plain
        return str(self.args[0]) if self.args else ""


class MissingDependencyError(EvidraError, ImportError):
    """An optional dependency is not installed; the message names the extra to install."""


class ModelLoadError(EvidraError, OSError):
    """A model or processor directory could not be loaded."""


class CorpusError(EvidraError, OSError):
    """A page store or document could not be read or written."""


class CheckpointError(EvidraError, OSError):
    """A training checkpoint could not be written or read back."""


def require(module: str, extra: str) -> None:
    """Raise ``MissingDependencyError`` unless ``module`` can be imported.

    >>> require("json", "core")
    """
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise MissingDependencyError(
            f"optional dependency {module!r} is not installed; install it with "
            f"`pip install 'evidra[{extra}]'`"
        )


class TrainingError(EvidraError, RuntimeError):
    """A training run cannot go on (e.g. non-finite updates several steps in a row)."""
