"""Vector indexes: exact multi-vector MaxSim (default), exact dense, and Qdrant (scale-out)."""

from __future__ import annotations

from evidra.retrieval.index.dense import DenseIndex
from evidra.retrieval.index.multivector import MaxSimOptions, MultiVectorIndex

__all__ = ["DenseIndex", "MaxSimOptions", "MultiVectorIndex"]
