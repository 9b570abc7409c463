"""evidra: evidence-grounded visual document RAG trained with reinforcement learning.

The top-level package keeps imports light: heavy pieces (torch, transformers) load only
when a submodule that needs them is imported (``evidra.models``, ``evidra.rl``...).
"""

from __future__ import annotations

from evidra.errors import EvidraError

__version__ = "0.1.0"

__all__ = ["EvidraError", "__version__"]
