"""Output formats of the policy: one file per paradigm, registered by name."""

from evidra.paradigms import (  # noqa: F401  (register)
    baselines,
    coe,
    evidence,
    react,
    search_agent,
    toolchain,
    zoom_agent,
)
from evidra.paradigms.base import PARADIGMS, Paradigm
from evidra.paradigms.direct import Direct

__all__ = ["PARADIGMS", "Direct", "Paradigm"]
