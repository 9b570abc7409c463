"""Single-vector text encoder over the page text layer via sentence-transformers.

Optional extra ``evidra[text-encoder]``. Give a local model directory (e.g. all-MiniLM-L6-v2 saved
with ``save_pretrained``); nothing is downloaded. Embeddings are L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from evidra.errors import ModelLoadError, require
from evidra.retrieval.base import ENCODERS, EncoderOptions
from evidra.retrieval.encoders._batching import check_texts
from evidra.retrieval.ocr import page_text

if TYPE_CHECKING:
    from evidra.types import Page


class SentenceEncoder:
    """Embeds page text and queries with one sentence-transformers model."""

    kind: Literal["single"] = "single"
    name = "minilm"

    def __init__(self, model: Any, options: EncoderOptions, *, ocr: bool = False) -> None:
        self.model = model
        self.options = options
        self.ocr = ocr

    @classmethod
    def load(
        cls, path: str | Path, options: EncoderOptions | None = None, *, ocr: bool = False
    ) -> SentenceEncoder:
        require("sentence_transformers", "text-encoder")
        from sentence_transformers import SentenceTransformer

        opts = options or EncoderOptions()
        if not Path(path).is_dir():
            raise ModelLoadError(f"sentence encoder path {str(path)!r} is not a local directory")
        return cls(SentenceTransformer(str(path), device=opts.device, local_files_only=True), opts, ocr=ocr)

    def _encode(self, texts: list[str]) -> list[Tensor]:
        with torch.inference_mode():
            emb = self.model.encode(
                texts, batch_size=self.options.batch_size, convert_to_tensor=True, normalize_embeddings=True
            )  # (N, D)
        return [row.float().cpu().unsqueeze(0) for row in emb]

    def embed_pages(self, pages: Sequence[Page]) -> list[Tensor]:
        return self._encode([page_text(p, ocr=self.ocr) for p in pages])

    def embed_queries(self, queries: Sequence[str]) -> list[Tensor]:
        check_texts(queries)
        return self._encode(list(queries))


def _factory(path: str | Path, options: EncoderOptions | None = None) -> SentenceEncoder:
    return SentenceEncoder.load(path, options)


ENCODERS.add("minilm", _factory)
