"""Output formats of the policy: one file per paradigm, registered by name."""

from evidra.paradigms import baselines, coe, evidence, toolchain  # noqa: F401  (register)
from evidra.paradigms.base import PARADIGMS, Paradigm
from evidra.paradigms.direct import Direct

__all__ = ["PARADIGMS", "Direct", "Paradigm"]
