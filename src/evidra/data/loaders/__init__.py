"""Benchmark loaders: each reads one benchmark's published files into ``Sample`` records.

>>> from evidra.data.loaders import LOADERS
>>> "mmlongbench" in LOADERS
True
"""

from __future__ import annotations

from evidra.data.loaders import (  # noqa: F401 - importing registers each loader
    beir,
    chartqa,
    docvqa,
    evisrag_top3,
    infovqa,
    mmlongbench,
    mpdocvqa,
    slidevqa,
    vidore_v1,
    vidoseek,
    visa,
)
from evidra.data.loaders.loader import LOADERS, Loader, load, parse_options

__all__ = ["LOADERS", "Loader", "load", "parse_options"]
