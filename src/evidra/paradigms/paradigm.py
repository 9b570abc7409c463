"""The paradigm contract: prompt builder + parser + reward names (+ scope tags).

A paradigm is one output format of the policy (direct answer, LAT's chain of evidence,
EVisRAG's observe/evidence/think/answer...). Its parser never raises on model output: it
returns ``Parsed`` with ``errors`` filled in, so malformed output is data counted in metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from evidra.core.registry import METHOD_PLUGINS, Registry
from evidra.core.tagscan import first_block
from evidra.core.types import Message, Page, Parsed, Sample


class Paradigm(Protocol):
    """Turns a sample into messages, the policy's text back into structure, and names its rewards."""

    @property
    def name(self) -> str: ...

    def build_messages(self, sample: Sample, pages: Sequence[Page]) -> list[Message]: ...

    def parse(self, text: str) -> Parsed: ...

    def reward_names(self) -> tuple[str, ...]: ...


PARADIGMS: Registry[Callable[[], Paradigm]] = Registry("paradigm", plugins=METHOD_PLUGINS)  # name -> factory


def first_tag(text: str, tag: str) -> str | None:
    """Content of the first complete ``<tag>...</tag>`` (DOTALL), or None.

    >>> first_tag("<think>x</think><answer> 42 </answer>", "answer")
    ' 42 '
    """
    return first_block(text, f"<{tag}>", f"</{tag}>")
