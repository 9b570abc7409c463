"""Log-probabilities of chosen tokens from a model's logits, without an fp32 copy of the logits.

The plain way, ``log_softmax(logits.float() / T).gather(ids)``, holds the 16-bit logits, their fp32
copy, the scaled copy and the fp32 log-softmax at once, and keeps the last for the backward pass: at
4 completions x 256 tokens x a 152k vocabulary that is about 2.2 GB at the forward's peak and 0.6 GB
kept per micro-batch, where the logits themselves are 0.3 GB. Past one chunk (64 MB in fp32),
``token_logprobs`` computes the same numbers chunk by chunk in fp32 and keeps only the logits
(which it does not copy) and one fp32 log-normaliser per position; the backward pass rebuilds each
chunk's softmax from them and writes the gradient in the logits' dtype:

    d log p(y_t) / d z_t = (onehot(y_t) - softmax(z_t / T)) / T

>>> import torch
>>> z = torch.tensor([[[1.0, 2.0, 3.0]]], requires_grad=True)
>>> lp = token_logprobs(z, torch.tensor([[2]]))
>>> round(lp.item(), 4)  # 3 - log(e + e^2 + e^3)
-0.4076
>>> lp.sum().backward(); [round(g, 4) for g in z.grad[0, 0].tolist()]
[-0.09, -0.2447, 0.3348]
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

CHUNK_BYTES = 64 * 2**20  # fp32 working memory per chunk of positions


def _chunks(logits: Tensor) -> list[tuple[int, slice]]:
    """(row, positions) chunks of ``logits`` seen as ``(B, R, V)``, each under ``CHUNK_BYTES`` in fp32."""
    step = max(1, CHUNK_BYTES // (4 * max(1, logits.shape[-1])))
    return [(b, slice(r, r + step)) for b in range(logits.shape[0]) for r in range(0, logits.shape[1], step)]


def _one_chunk(logits: Tensor) -> bool:
    """Whether all of ``logits`` in fp32 fits in one chunk: then the plain log-softmax of the whole
    costs no more memory, runs as one call, and gives the numbers recorded runs were made with."""
    return logits.numel() * 4 <= CHUNK_BYTES


def _as_3d(x: Tensor, trailing: int) -> Tensor:
    """``x`` as ``(B, R, *trailing dims)`` without a copy where it has at most 3 dimensions (a
    ``logits[:, :-1]`` slice is not one block of memory, so it is walked row by row, never flattened)."""
    lead = x.ndim - trailing
    if lead == 2:
        return x
    if lead < 2:
        return x.reshape((1,) * (2 - lead) + tuple(x.shape))
    return x.reshape(-1, x.shape[lead - 1], *x.shape[lead:])


def _work_dtype(logits: Tensor) -> torch.dtype:
    """fp32 for 16-bit logits, their own dtype for fp32 and fp64."""
    return torch.promote_types(logits.dtype, torch.float32)


def _fp32(z: Tensor, temperature: float) -> Tensor:
    """A fresh copy of ``z`` in at least fp32, divided by the temperature (never the caller's tensor)."""
    return z.to(_work_dtype(z), copy=True).div_(temperature)


def _log_softmax(z: Tensor, temperature: float) -> Tensor:
    """The log-softmax of ``z / temperature`` in at least fp32, over the last dimension."""
    return torch.log_softmax(_fp32(z, temperature), dim=-1)


class _TokenLogprobs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, logits: Tensor, ids: Tensor, temperature: float) -> Tensor:
        z3, ids3 = _as_3d(logits, 1), _as_3d(ids, 0)  # (B, R, V), (B, R)
        out = torch.empty(ids3.shape, dtype=_work_dtype(logits), device=logits.device)  # (B, R)
        lse = torch.empty_like(out)
        for b, r in _chunks(z3):
            z = _fp32(z3[b, r], temperature)  # (n, V)
            lse[b, r] = torch.logsumexp(z, dim=-1)
            out[b, r] = z.gather(-1, ids3[b, r, None]).squeeze(-1) - lse[b, r]
        ctx.save_for_backward(logits, ids, lse)
        ctx.temperature = temperature
        return out.view(ids.shape)

    @staticmethod
    def backward(ctx: Any, grad_out: Tensor) -> tuple[Tensor, None, None]:
        logits, ids, lse = ctx.saved_tensors
        temperature = ctx.temperature
        z3, ids3 = _as_3d(logits, 1), _as_3d(ids, 0)  # (B, R, V), (B, R)
        g3 = _as_3d(grad_out, 0).to(_work_dtype(logits)) / temperature  # (B, R)
        grad = torch.empty(z3.shape, dtype=logits.dtype, device=logits.device)  # (B, R, V)
        for b, r in _chunks(z3):
            soft = _fp32(z3[b, r], temperature).sub_(lse[b, r, None]).exp_()  # softmax (n, V)
            part = soft.mul_(-g3[b, r, None])  # -g * softmax
            part.scatter_add_(-1, ids3[b, r, None], g3[b, r, None])  # + g at the chosen token
            grad[b, r] = part
        return grad.view(logits.shape), None, None


def token_logprobs(logits: Tensor, ids: Tensor, temperature: float = 1.0) -> Tensor:
    """Log-probs ``(...,)`` of ``ids`` ``(...,)`` under ``logits / temperature`` ``(..., V)``, in fp32
    (fp64 for fp64 logits). Differentiable in ``logits`` (any float dtype; the gradient comes back in
    that dtype)."""
    if _one_chunk(logits):  # small logits: one log-softmax, the plain arithmetic and its numbers
        return _log_softmax(logits, temperature).gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    return _TokenLogprobs.apply(logits, ids, float(temperature))


@torch.no_grad()
def token_entropy(logits: Tensor, temperature: float = 1.0) -> Tensor:
    """Entropy ``(...,)`` of each position's distribution ``softmax(logits / temperature)``, chunk by
    chunk and in the dtype of ``token_logprobs`` (never differentiable)."""
    if _one_chunk(logits):
        return _entropy(_log_softmax(logits, temperature))
    z3 = _as_3d(logits, 1)  # (B, R, V)
    out = torch.empty(z3.shape[:-1], dtype=_work_dtype(logits), device=logits.device)  # (B, R)
    for b, r in _chunks(z3):
        out[b, r] = _entropy(_log_softmax(z3[b, r], temperature))
    return out.view(logits.shape[:-1])


def _entropy(logp: Tensor) -> Tensor:
    return -(logp.exp() * logp).sum(-1)
