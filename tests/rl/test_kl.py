"""KL estimators and placements: hand-computed values, verl/TRL formulas."""

from __future__ import annotations

import math

import pytest
import torch

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.rl.algo.kl import KL_ESTIMATORS, k1, k2, k3, kl_in_reward, kl_loss, kl_penalty, last_token_index
from evidra.rl.algo.losses import aggregate

LOGP = torch.tensor([[-1.0, -2.0]])
REF = torch.tensor([[-1.5, -1.0]])  # logp - ref = [0.5, -1.0]; ref - logp = [-0.5, 1.0]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("k1", [0.5, -1.0]),
        ("kl", [0.5, -1.0]),
        ("abs", [0.5, 1.0]),
        ("k2", [0.125, 0.5]),  # 0.5 · [0.25, 1]
        ("mse", [0.125, 0.5]),
        # exp(-0.5) + 0.5 - 1 = 0.106531; exp(1) - 1 - 1 = 0.718282
        ("k3", [math.exp(-0.5) - 0.5, math.e - 2.0]),
        ("low_var_kl", [math.exp(-0.5) - 0.5, math.e - 2.0]),
    ],
)
def test_estimators_hand_computed(name: str, expected: list[float]) -> None:
    assert torch.allclose(kl_penalty(LOGP, REF, name), torch.tensor([expected]), atol=1e-6)


def test_k3_clamps_like_verl_and_matches_trl_elsewhere() -> None:
    # ref - logp = 30 -> clamped to 20 -> e^20 - 21 -> clamped to 10
    assert kl_penalty(torch.tensor([[-30.0]]), torch.tensor([[0.0]]), "k3").item() == 10.0
    g = torch.Generator().manual_seed(0)
    logp, ref = -torch.rand(4, 6, generator=g) * 2, -torch.rand(4, 6, generator=g) * 2
    trl = torch.exp(ref - logp) - (ref - logp) - 1  # TRL per_token_kl
    assert torch.allclose(k3(logp, ref), trl)
    assert (k3(logp, ref) >= 0).all()


def test_registry_and_shape_errors() -> None:
    assert KL_ESTIMATORS.get("k1") is k1 and KL_ESTIMATORS.get("mse") is k2
    with pytest.raises(RegistryError, match="did you mean"):
        kl_penalty(LOGP, REF, "low_var")
    with pytest.raises(InvalidInputError, match="differ in shape"):
        kl_penalty(LOGP, REF[:, :1])


def test_kl_loss_aggregates_like_the_policy_loss() -> None:
    # k3 mean over both tokens = (0.106531 + 0.718282) / 2 = 0.412406; coef 0.1 -> 0.0412406
    got = kl_loss(LOGP, REF, torch.ones(1, 2), coef=0.1)
    assert got.item() == pytest.approx(0.1 * (math.exp(-0.5) - 0.5 + math.e - 2.0) / 2, rel=1e-6)
    # only the first token masked, global normaliser 4 tokens: 0.1 · 0.106531 / 4
    got = kl_loss(LOGP, REF, torch.tensor([[1, 0]]), coef=0.1, global_tokens=4)
    assert got.item() == pytest.approx(0.1 * (math.exp(-0.5) - 0.5) / 4, rel=1e-6)
    seq = kl_loss(LOGP, REF, torch.ones(1, 2), coef=1.0, estimator="k2", mode="seq-mean-token-sum")
    assert torch.allclose(seq, aggregate(k2(LOGP, REF), torch.ones(1, 2), "seq-mean-token-sum"))


def test_kl_loss_gradient_k3() -> None:
    # d/dlogp [exp(ref - logp) - (ref - logp) - 1] = 1 - exp(ref - logp): [1 - e^-0.5, 1 - e]
    logp = LOGP.clone().requires_grad_(True)
    kl_loss(logp, REF, torch.ones(1, 2), coef=1.0, mode="seq-mean-token-sum").backward()
    assert logp.grad is not None
    assert torch.allclose(logp.grad, torch.tensor([[1 - math.exp(-0.5), 1 - math.e]]), atol=1e-6)


def test_kl_in_reward_per_token_and_per_sequence() -> None:
    # L = 3, last masked token is t=1; β = 0.1, k1 = [0.5, -1.0]
    # token rewards: [-0.1·0.5, 2 - 0.1·(-1.0), 0] = [-0.05, 2.1, 0]; sequence: 2 - 0.1·(-0.5) = 2.05
    logp = torch.tensor([[-1.0, -2.0, -7.0]])
    ref = torch.tensor([[-1.5, -1.0, 0.0]])
    mask = torch.tensor([[1, 1, 0]])
    tokens = kl_in_reward(torch.tensor([2.0]), logp, ref, mask, beta=0.1)
    assert torch.allclose(tokens, torch.tensor([[-0.05, 2.1, 0.0]]))
    seq = kl_in_reward(torch.tensor([2.0]), logp, ref, mask, beta=0.1, per="sequence")
    assert torch.allclose(seq, torch.tensor([2.05])) and torch.allclose(tokens.sum(-1), seq)


def test_kl_in_reward_errors_and_last_token() -> None:
    assert last_token_index(torch.tensor([[1, 1, 0], [0, 0, 0], [0, 1, 1]])).tolist() == [1, -1, 2]
    with pytest.raises(InvalidInputError, match="all-zero mask"):
        kl_in_reward(torch.tensor([1.0]), LOGP, REF, torch.zeros(1, 2), beta=0.1)
    with pytest.raises(InvalidInputError, match="scores must be"):
        kl_in_reward(torch.tensor([1.0, 2.0]), LOGP, REF, torch.ones(1, 2), beta=0.1)
    with pytest.raises(InvalidInputError, match="per must be"):
        kl_in_reward(torch.tensor([1.0]), LOGP, REF, torch.ones(1, 2), beta=0.1, per="turn")  # type: ignore[arg-type]
