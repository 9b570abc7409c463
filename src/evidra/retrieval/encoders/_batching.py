"""Shared plumbing of the model-based encoders: batching, dtype names, padding removal."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TypeVar

import torch
from torch import Tensor

from evidra.core.errors import InvalidInputError

T = TypeVar("T")

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def batches(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def torch_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise InvalidInputError(f"unknown dtype {name!r}; use one of {', '.join(DTYPES)}") from None


def unpad(embeddings: Tensor, attention_mask: Tensor) -> list[Tensor]:
    """Split a padded batch ``(B, L, D)`` into per-item ``(L_i, D)`` float32 CPU tensors.

    Keeping only positions with ``attention_mask == 1`` works for left and right padding alike.
    """
    mask = attention_mask.bool().cpu()  # (B, L)
    emb = embeddings.detach().float().cpu()  # (B, L, D)
    return [emb[i][mask[i]] for i in range(emb.shape[0])]


def check_texts(queries: Sequence[str]) -> None:
    if isinstance(queries, str):
        raise InvalidInputError("pass a list of query strings, not a single string")
    for i, q in enumerate(queries):
        if not isinstance(q, str) or not q.strip():
            raise InvalidInputError(f"query {i} must be a non-empty string, got {q!r:.60}")
