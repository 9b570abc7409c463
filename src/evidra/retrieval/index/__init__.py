"""Vector indexes: exact multi-vector MaxSim (default), exact dense, Qdrant (a server or Qdrant Edge)."""

from __future__ import annotations

from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex

__all__ = ["DenseIndex", "MaxSimOptions", "MultiVectorIndex"]
