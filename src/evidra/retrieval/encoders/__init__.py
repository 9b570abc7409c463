"""Page/query encoders, one file per family, registered by name in ``ENCODERS``.

Importing this package registers all of them; heavy or optional dependencies are imported only
when an encoder is loaded.

>>> enc = load_encoder("colqwen2", "ckpt/colqwen2-v1.0-hf")      # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from evidra.retrieval.encoders import colvision, dse, sentence
from evidra.retrieval.encoders.bm25 import BM25Params, BM25Retriever
from evidra.retrieval.interfaces import ENCODERS, Encoder, EncoderOptions

__all__ = ["BM25Params", "BM25Retriever", "colvision", "dse", "load_encoder", "sentence"]


def load_encoder(name: str, path: str | Path, options: EncoderOptions | None = None) -> Encoder:
    """Load the encoder registered as ``name`` from the local checkpoint ``path``."""
    return ENCODERS.get(name)(path, options)
