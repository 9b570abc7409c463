"""Single-vector page encoders from a Qwen-VL checkpoint (DSE / VisRAG-Ret style).

DSE (Ma et al. 2024) feeds the page image with a short prompt and takes the last token's final
hidden state, L2-normalised; queries get a text-only prompt and the same pooling. VisRAG-Ret
pools with a position-weighted mean instead (``pooling="weighted"``: the i-th real token weighs
i, so later tokens, which have attended to more of the input, count more); ``pooling="mean"``
gives a plain masked mean. The ``visrag`` encoder applies VisRAG-Ret's pooling to a Qwen-VL
backbone (the released VisRAG-Ret checkpoint is a MiniCPM-V model, which needs remote code).
The tokenizer pads on the left, so the last position is every item's last real token.

>>> enc = SingleVectorEncoder.load("ckpt/dse-qwen2-2b-mrl-v1", pooling="last")   # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from torch import Tensor

from evidra.core.devices import resolve_device
from evidra.core.errors import InvalidInputError
from evidra.retrieval.encoders._batching import batches, check_texts
from evidra.retrieval.interfaces import ENCODERS, EncoderOptions

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

    from evidra.core.types import Page
    from evidra.models.loading import VLM

Pooling = Literal["last", "mean", "weighted"]
POOLINGS = ("last", "mean", "weighted")

# DSE's released prompts (Tevatron dse-qwen2 model card)
PAGE_PROMPT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>What is shown in this image?<|im_end|>\n"
    "<|im_start|>assistant\n<|endoftext|>"
)
QUERY_PROMPT = "<|im_start|>user\nQuery: {query}<|im_end|>\n<|im_start|>assistant\n<|endoftext|>"


def pool_hidden(hidden: Tensor, attention_mask: Tensor, pooling: Pooling) -> Tensor:
    """Pool ``(B, L, H)`` hidden states to ``(B, H)`` unit vectors.

    >>> h = torch.tensor([[[0.0, 0.0], [3.0, 4.0]], [[1.0, 0.0], [1.0, 2.0]]])
    >>> pool_hidden(h, torch.tensor([[0, 1], [1, 1]]), "mean").tolist()  # [3,4]/5; [1,1]/sqrt 2
    [[0.6000000238418579, 0.800000011920929], [0.7071067690849304, 0.7071067690849304]]
    >>> pool_hidden(h, torch.tensor([[0, 1], [1, 1]]), "weighted").round(decimals=4).tolist()
    [[0.6000000238418579, 0.800000011920929], [0.6000000238418579, 0.800000011920929]]
    """
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)  # (B, L, 1)
    if pooling == "last":
        if not bool(attention_mask[:, -1].all()):
            raise InvalidInputError(
                "last-token pooling needs left padding; set tokenizer.padding_side='left'"
            )
        pooled = hidden[:, -1]  # (B, H)
    elif pooling == "mean":
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # (B, H)
    elif pooling == "weighted":  # VisRAG-Ret: weight = rank of the token among the real ones
        weights = mask * mask.cumsum(dim=1)  # (B, L, 1): 0 on padding, 1..n on real tokens
        pooled = (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # (B, H)
    else:
        raise InvalidInputError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
    return torch.nn.functional.normalize(pooled.float(), dim=-1)


class SingleVectorEncoder:
    """One normalised vector per page and per query from a Qwen-VL backbone."""

    kind: Literal["single"] = "single"

    def __init__(self, vlm: VLM, *, pooling: Pooling, options: EncoderOptions, name: str = "dse") -> None:
        if pooling not in POOLINGS:
            raise InvalidInputError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLINGS)}")
        self.vlm = vlm
        self.pooling: Pooling = pooling
        self.options = options
        self.name = name

    @classmethod
    def load(
        cls, path: str | Path, options: EncoderOptions | None = None, *, pooling: Pooling = "last"
    ) -> SingleVectorEncoder:
        from evidra.models.loading import load_vlm

        opts = options or EncoderOptions()
        opts = replace(opts, device=resolve_device(opts.device))
        name = "dse" if pooling == "last" else "visrag"
        vlm = load_vlm(path, dtype=opts.dtype, device=opts.device, kind=f"Qwen-VL {name} retriever")
        vlm.processor.tokenizer.padding_side = "left"
        return cls(vlm, pooling=pooling, options=opts, name=name)

    @property
    def dim(self) -> int:
        return int(self.vlm.model.config.get_text_config().hidden_size)

    def _encode(self, text: list[str], images: list[PILImage] | None) -> Tensor:
        inputs = self.vlm.processor(text=text, images=images, return_tensors="pt", padding=True)
        inputs = inputs.to(self.options.device)
        with torch.inference_mode():
            hidden = self.vlm.model.model(**inputs).last_hidden_state  # (B, L, H)
        return pool_hidden(hidden, inputs["attention_mask"], self.pooling).cpu()  # (B, H)

    def embed_pages(self, pages: Sequence[Page]) -> list[Tensor]:
        out: list[Tensor] = []
        for batch in batches(pages, self.options.batch_size):
            vecs = self._encode([PAGE_PROMPT] * len(batch), [p.open_image() for p in batch])
            out += [v.unsqueeze(0) for v in vecs]
        return out

    def embed_queries(self, queries: Sequence[str]) -> list[Tensor]:
        check_texts(queries)
        out: list[Tensor] = []
        for batch in batches(queries, self.options.batch_size):
            vecs = self._encode([QUERY_PROMPT.format(query=q) for q in batch], None)
            out += [v.unsqueeze(0) for v in vecs]
        return out


def _dse(path: str | Path, options: EncoderOptions | None = None) -> SingleVectorEncoder:
    return SingleVectorEncoder.load(path, options, pooling="last")


def _visrag(path: str | Path, options: EncoderOptions | None = None) -> SingleVectorEncoder:
    return SingleVectorEncoder.load(path, options, pooling="weighted")


ENCODERS.add("dse", _dse)
ENCODERS.add("visrag", _visrag)
