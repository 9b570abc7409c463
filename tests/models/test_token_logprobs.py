"""Chosen-token log-probs chunk by chunk: the plain log-softmax's numbers and gradients, less memory."""

from __future__ import annotations

import math

import pytest
import torch

from evidra.models import token_logprobs as tl
from evidra.models.token_logprobs import token_entropy, token_logprobs


def _plain(logits: torch.Tensor, ids: torch.Tensor, temperature: float) -> torch.Tensor:
    logp = torch.log_softmax(logits.float() / temperature, dim=-1)
    return logp.gather(-1, ids.unsqueeze(-1)).squeeze(-1)


def test_hand_computed_value_and_gradient_at_a_temperature() -> None:
    z = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)  # at T = 0.5: weights 1 and 9
    lp = token_logprobs(z, torch.tensor([1]), temperature=0.5)
    assert lp.item() == pytest.approx(math.log(9 / 10))
    lp.sum().backward()
    # d/dz = (onehot - softmax) / T = ([0, 1] - [0.1, 0.9]) / 0.5
    assert z.grad is not None
    assert z.grad[0].tolist() == pytest.approx([-0.2, 0.2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_equals_the_plain_log_softmax_on_a_sliced_batch_across_chunks(
    dtype: torch.dtype, temperature: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tl, "CHUNK_BYTES", 3 * 40 * 4)  # 3 positions per chunk: 9 positions = 3 chunks
    torch.manual_seed(0)
    full = (torch.randn(2, 10, 40) * 4).to(dtype)  # (B, R + 1, V)
    ids = torch.randint(0, 40, (2, 9))
    weights = torch.randn(2, 9)
    ours, theirs = full.clone().requires_grad_(), full.clone().requires_grad_()
    got = token_logprobs(ours[:, :-1], ids, temperature)  # a slice: not one block of memory
    want = _plain(theirs[:, :-1], ids, temperature)
    assert got.dtype == torch.float32 and got.shape == (2, 9)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=0)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    assert ours.grad is not None and theirs.grad is not None and ours.grad.dtype == dtype
    torch.testing.assert_close(ours.grad.float(), theirs.grad.float(), atol=2e-6, rtol=0)
    assert ours.grad[:, -1].abs().sum() == 0  # the last position predicts nothing
    assert torch.equal(ours.detach(), full)  # the logits are read, never written


def test_gradcheck_in_double_for_one_and_two_leading_dimensions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tl, "CHUNK_BYTES", 2 * 7 * 4)  # 2 positions per chunk
    torch.manual_seed(1)
    for shape in [(5, 7), (2, 3, 7)]:
        z = torch.randn(*shape, dtype=torch.float64, requires_grad=True)
        ids = torch.randint(0, 7, shape[:-1])
        assert torch.autograd.gradcheck(lambda x, ids=ids: token_logprobs(x, ids, 0.8), (z,))


@pytest.mark.parametrize("chunk_bytes", [5 * 11 * 4, tl.CHUNK_BYTES])
def test_entropy_and_no_grad_use(chunk_bytes: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tl, "CHUNK_BYTES", chunk_bytes)  # 5 positions per chunk, or all in one
    torch.manual_seed(2)
    z = torch.randn(3, 4, 11)
    ids = torch.randint(0, 11, (3, 4))
    logp = torch.log_softmax(z / 1.3, dim=-1)
    torch.testing.assert_close(token_entropy(z, 1.3), -(logp.exp() * logp).sum(-1))
    with torch.no_grad():
        lp = token_logprobs(z, ids, 1.3)
    assert not lp.requires_grad
    torch.testing.assert_close(lp, _plain(z, ids, 1.3))
    with torch.inference_mode():  # how the reference and sampling passes call it
        again = token_logprobs(z, ids, 1.3)
    assert again.is_inference() and torch.equal(again, lp)


def _saved_bytes_beyond(inputs: torch.Tensor, run: object) -> int:
    """Bytes the autograd graph keeps for backward in storages other than ``inputs``' own."""
    kept: dict[int, int] = {}
    own = inputs.untyped_storage().data_ptr()

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() != own:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()  # type: ignore[operator]
    return sum(kept.values())


def test_keeps_for_backward_only_the_logits_and_a_normaliser_per_position(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tl, "CHUNK_BYTES", 16 * 1000 * 4)  # past 16 positions: chunks
    logits = torch.randn(2, 64, 1000, dtype=torch.bfloat16, requires_grad=True)
    ids = torch.randint(0, 1000, (2, 64))
    ours = _saved_bytes_beyond(logits, lambda: token_logprobs(logits, ids))
    plain = _saved_bytes_beyond(logits, lambda: _plain(logits, ids, 1.0))
    assert ours <= 2 * 64 * (4 + 8)  # one fp32 normaliser per position (+ the int64 ids)
    assert plain >= 2 * 64 * 1000 * 4  # the plain way keeps an fp32 log-softmax: twice the logits


def test_logits_within_one_chunk_take_the_plain_log_softmax_bit_for_bit() -> None:
    """Small logits (a tiny model's) give exactly the numbers of the plain way, value and gradient."""
    torch.manual_seed(3)
    full = torch.randn(3, 6, 50)
    ids = torch.randint(0, 50, (3, 5))
    ours, theirs = full.clone().requires_grad_(), full.clone().requires_grad_()
    got, want = token_logprobs(ours[:, :-1], ids, 0.9), _plain(theirs[:, :-1], ids, 0.9)
    assert torch.equal(got, want)
    got.sum().backward()
    want.sum().backward()
    assert ours.grad is not None and theirs.grad is not None
    assert torch.equal(ours.grad, theirs.grad)
