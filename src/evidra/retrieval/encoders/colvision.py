"""Late-interaction page encoders through transformers' own classes: ColQwen2 and ColPali.

Pages go through the processor's image path (its fixed visual prompt), queries through its
query path (prefix plus query-augmentation tokens). The model returns unit-norm vectors per
token, zeroed at padding; we keep only the positions the attention mask marks, per item, so a
zero vector never enters MaxSim (it would score 0 where every real match is negative).

>>> enc = ColVisionEncoder.load("ckpt/colqwen2-v1.0-hf")       # doctest: +SKIP
>>> pages = enc.embed_pages(store.pages())  # [(L_i, 128), ...]  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import torch
from torch import Tensor

from evidra.errors import ModelLoadError
from evidra.retrieval.base import ENCODERS, EncoderOptions
from evidra.retrieval.encoders._batching import batches, check_texts, torch_dtype, unpad

if TYPE_CHECKING:
    from evidra.types import Page

logger = logging.getLogger(__name__)

_CLASSES = {
    "colqwen2": ("ColQwen2ForRetrieval", "ColQwen2Processor"),
    "colpali": ("ColPaliForRetrieval", "ColPaliProcessor"),
}

_TITLES = {"colqwen2": "ColQwen2", "colpali": "ColPali"}


class ColVisionEncoder:
    """A ColQwen2 / ColPali retriever: multi-vector pages and queries."""

    kind: Literal["multi"] = "multi"

    def __init__(self, model: Any, processor: Any, *, name: str, options: EncoderOptions) -> None:
        self.model = model
        self.processor = processor
        self.name = name
        self.options = options

    @classmethod
    def load(
        cls, path: str | Path, options: EncoderOptions | None = None, *, expected: str | None = None
    ) -> ColVisionEncoder:
        """Load a local ColQwen2 or ColPali checkpoint directory (its ``model_type`` decides).

        With ``expected`` (the encoder name asked for) a checkpoint of the other family is refused,
        so an index never records one encoder while holding vectors of another.
        """
        import transformers

        from evidra.models.loading import read_model_type

        opts = options or EncoderOptions()
        kind = f"{_TITLES[expected]} retriever" if expected in _TITLES else "ColQwen2 / ColPali retriever"
        arch = read_model_type(path, kind)
        if arch not in _CLASSES or (expected is not None and arch != expected):
            fix = (
                f"use encoder {arch!r} for it"
                if arch in _CLASSES
                else "pass a ColQwen2 or ColPali checkpoint"
            )
            raise ModelLoadError(
                f"{str(path)!r} is a {arch!r} checkpoint, not {expected or ' / '.join(_CLASSES)}; {fix}"
            )
        model_cls, proc_cls = (getattr(transformers, n) for n in _CLASSES[arch])
        try:
            processor = proc_cls.from_pretrained(str(path), local_files_only=True)
            model = model_cls.from_pretrained(str(path), dtype=torch_dtype(opts.dtype), local_files_only=True)
        except Exception as exc:  # transformers raises many kinds here; name the directory
            raise ModelLoadError(f"could not load {arch} from {str(path)!r}: {exc}") from exc
        model.to(opts.device).eval()
        return cls(model, processor, name=arch, options=opts)

    @property
    def dim(self) -> int:
        return int(self.model.config.embedding_dim)

    def _forward(self, inputs: Any) -> list[Tensor]:
        inputs = inputs.to(self.options.device)
        with torch.inference_mode():
            out = self.model(**inputs).embeddings  # (B, L, D), unit norm, zero at padding
        return unpad(out, inputs["attention_mask"])

    def embed_pages(self, pages: Sequence[Page]) -> list[Tensor]:
        out: list[Tensor] = []
        for batch in batches(pages, self.options.batch_size):
            images = [page.open_image() for page in batch]
            out += self._forward(self.processor(images=images, return_tensors="pt"))
        return out

    def embed_queries(self, queries: Sequence[str]) -> list[Tensor]:
        check_texts(queries)
        out: list[Tensor] = []
        for batch in batches(queries, self.options.batch_size):
            out += self._forward(self.processor(text=list(batch), return_tensors="pt"))
        return out


def _colqwen2(path: str | Path, options: EncoderOptions | None = None) -> ColVisionEncoder:
    return ColVisionEncoder.load(path, options, expected="colqwen2")


def _colpali(path: str | Path, options: EncoderOptions | None = None) -> ColVisionEncoder:
    return ColVisionEncoder.load(path, options, expected="colpali")


ENCODERS.add("colqwen2", _colqwen2)
ENCODERS.add("colpali", _colpali)
