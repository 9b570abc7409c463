"""evidra: evidence-grounded visual document RAG trained with reinforcement learning.

The top-level package keeps imports light: heavy pieces (torch, transformers) load only
when a submodule that needs them is imported (``evidra.models``, ``evidra.rl``...), and
``evidra.RAG`` / ``evidra.Answer`` load ``evidra.rag`` on first use.

>>> import evidra                                                   # doctest: +SKIP
>>> rag = evidra.RAG.load("store/", "idx/", model="ckpt/lat-7b")   # doctest: +SKIP
>>> answer = rag.ask("When was Orion founded?")                     # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from evidra.core.errors import EvidraError

if TYPE_CHECKING:
    from evidra.rag import RAG, Answer, Citation

__version__ = "0.1.0"

__all__ = ["RAG", "Answer", "Citation", "EvidraError", "__version__"]

_LAZY = {"RAG", "Answer", "Citation"}  # from evidra.rag, which imports torch only when used


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import evidra.rag

        return getattr(evidra.rag, name)
    raise AttributeError(f"module 'evidra' has no attribute {name!r}")
