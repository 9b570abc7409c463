"""Output formats more than one method uses, registered by name: the direct answer, the baselines and
the search agent's action language. A paper's own format lives in its folder (``methods/<paper>/``)."""

from evidra.paradigms import baselines, react, search_agent  # noqa: F401  (register)
from evidra.paradigms.direct import Direct
from evidra.paradigms.paradigm import PARADIGMS, Paradigm

__all__ = ["PARADIGMS", "Direct", "Paradigm"]
