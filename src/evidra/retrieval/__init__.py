"""Page retrieval: encoders -> index -> search, plus a batching HTTP service.

* ``encoders/``  ColQwen2 / ColPali (multi-vector), DSE / VisRAG (single-vector), sentence-transformers
  text, BM25 over the text layer; ``ocr.py`` reads image-only pages with tesseract.
* ``index/``     exact MaxSim over fp16 shards (embedded default), exact dense, Qdrant (a server or
  cluster, or Qdrant Edge inside the process).
* ``hybrid.py``  hybrid search: z-score, min-max or reciprocal-rank fusion of retrievers
  (benchmark evaluation of retrieval: ``evidra.eval.retrieval``).
* ``engine.py``  an index directory that knows its encoder (what ``evidra index`` builds).
* ``server.py`` / ``client.py``  ``evidra serve-index`` (batching; its starlette app in ``app.py``,
  uvicorn in ``serving.py``, request checks in ``http.py``) and the clients environments use.

Names are imported lazily, so ``from evidra.retrieval.service.client import SearchClient`` stays light.

>>> from evidra.retrieval import build_index, open_index        # doctest: +SKIP
>>> engine = build_index(pages, "idx/", "colqwen2", "ckpt/colqwen2")          # doctest: +SKIP
>>> engine.retriever.search(["total revenue 2019"], k=5, exclude=[seen_ids])  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "ENCODERS": "evidra.retrieval.interfaces",
    "INDEXES": "evidra.retrieval.lifecycle.backends",
    "EncodedRetriever": "evidra.retrieval.interfaces",
    "Encoder": "evidra.retrieval.interfaces",
    "EncoderOptions": "evidra.retrieval.interfaces",
    "Hit": "evidra.retrieval.interfaces",
    "Retriever": "evidra.retrieval.interfaces",
    "VectorIndex": "evidra.retrieval.interfaces",
    "BM25Retriever": "evidra.retrieval.encoders.bm25",
    "load_encoder": "evidra.retrieval.encoders",
    "DenseIndex": "evidra.retrieval.index.dense",
    "MaxSimOptions": "evidra.retrieval.index.multivector",
    "MultiVectorIndex": "evidra.retrieval.index.multivector",
    "Fusion": "evidra.retrieval.hybrid",
    "HybridRetriever": "evidra.retrieval.hybrid",
    "Engine": "evidra.retrieval.lifecycle.index_folder",
    "build_index": "evidra.retrieval.lifecycle.index_folder",
    "open_index": "evidra.retrieval.lifecycle.index_folder",
    "SearchService": "evidra.retrieval.service.server",
    "SearchClient": "evidra.retrieval.service.client",
    "AsyncSearchClient": "evidra.retrieval.service.client",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'evidra.retrieval' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
