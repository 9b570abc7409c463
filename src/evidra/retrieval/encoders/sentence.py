"""Single-vector text encoder over the page text layer via sentence-transformers.

Optional extra ``evidra[text-encoder]``. Give a model directory (e.g. all-MiniLM-L6-v2 saved with
``save_pretrained``) or a hub id (``sentence-transformers/all-MiniLM-L6-v2``, fetched into the hub
cache). Embeddings are L2-normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from evidra.core.devices import resolve_device
from evidra.core.errors import ModelLoadError, require
from evidra.models.references import resolve_model_ref
from evidra.retrieval.encoders._batching import check_texts
from evidra.retrieval.interfaces import ENCODERS, EncoderOptions
from evidra.retrieval.ocr import page_text

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from evidra.core.types import Page


class SentenceEncoder:
    """Embeds page text and queries with one sentence-transformers model."""

    kind: Literal["single"] = "single"
    name = "minilm"

    def __init__(self, model: SentenceTransformer, options: EncoderOptions, *, ocr: bool = False) -> None:
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
        opts = replace(opts, device=resolve_device(opts.device))
        root = resolve_model_ref(path, "sentence encoder")
        if not root.is_dir():
            raise ModelLoadError(f"sentence encoder path {str(path)!r} is not a directory")
        return cls(SentenceTransformer(str(root), device=opts.device, local_files_only=True), opts, ocr=ocr)

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
