"""How far the sampler's log-probs are from the trainer's for the same tokens.

A rollout engine (vLLM, or transformers' cached decoding) and the trainer's full forward pass
compute the same log-probs with different kernels, precision and batching; the gap biases the
importance ratio of the first update (it should be 1). This measures it per step:

>>> import torch
>>> sampler = torch.tensor([[-1.0, -2.0, -3.0]])
>>> trainer = torch.tensor([[-1.5, -2.0, -9.0]])
>>> mask = torch.tensor([[1.0, 1.0, 0.0]])     # the third token is an observation
>>> m = logprob_mismatch(sampler, trainer, mask)
>>> round(m.mean_abs, 6), round(m.max_abs, 6), m.tokens   # |-0.5|, |0| -> mean 0.25, max 0.5
(0.25, 0.5, 2)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError

if TYPE_CHECKING:
    from torch import Tensor


@dataclass(frozen=True)
class Mismatch:
    mean_abs: float  # mean |sampler - trainer| over masked-in tokens
    max_abs: float
    tokens: int  # how many tokens were compared

    def metrics(self, prefix: str = "mismatch") -> dict[str, float]:
        return {f"{prefix}/logp_abs_mean": self.mean_abs, f"{prefix}/logp_abs_max": self.max_abs}


def logprob_mismatch(sampler_logprobs: Tensor, trainer_logprobs: Tensor, mask: Tensor) -> Mismatch:
    """|Δ log p| between two ``(B, L)`` log-prob tensors over the tokens where ``mask`` is 1."""

    if sampler_logprobs.shape != trainer_logprobs.shape or sampler_logprobs.shape != mask.shape:
        raise InvalidInputError(
            f"log-prob shapes differ: sampler {tuple(sampler_logprobs.shape)}, "
            f"trainer {tuple(trainer_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    keep = mask.bool()
    delta = (sampler_logprobs.detach().float() - trainer_logprobs.detach().float()).abs()[keep]  # (N,)
    if delta.numel() == 0:
        return Mismatch(0.0, 0.0, 0)
    return Mismatch(float(delta.mean()), float(delta.max()), int(delta.numel()))


def combined(parts: list[Mismatch]) -> Mismatch:
    """One mismatch over several batches: token-weighted mean, overall max."""
    tokens = sum(p.tokens for p in parts)
    if tokens == 0:
        return Mismatch(0.0, 0.0, 0)
    mean = sum(p.mean_abs * p.tokens for p in parts) / tokens
    return Mismatch(mean, max(p.max_abs for p in parts), tokens)
