"""Policy losses and aggregation: hand-computed values, verl/TRL formulas written out literally
(as verl, TRL and EasyR1 compute them), micro-batch and data-parallel invariance."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

from evidra.core.errors import InvalidInputError, RegistryError
from evidra.rl.algo.advantages import router_advantages
from evidra.rl.algo.losses import (
    LOSS_AGGREGATIONS,
    POLICY_LOSSES,
    active_scope_count,
    aggregate,
    aggregate_scoped,
    batch_counts,
    gspo_loss,
    ppo_clip_loss,
)

MODES = ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]


def _random_batch(seed: int, b: int = 5, length: int = 7) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(b, length, generator=g, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(b, length, generator=g, dtype=torch.float64)
    adv = torch.randn(b, length, generator=g, dtype=torch.float64)
    lengths = torch.randint(1, length + 1, (b,), generator=g)
    mask = (torch.arange(length)[None, :] < lengths[:, None]).to(torch.float64)
    return logp, old, adv, mask


# --- PPO clip -------------------------------------------------------------------------------

# A = [1, 1, -1, -1], ratio = [1.5, 0.9, 0.5, 4.0], clip 0.2 / 0.28 (DAPO), dual clip 3
LOGP = torch.log(torch.tensor([[1.5, 0.9, 0.5, 4.0]], dtype=torch.float64))
OLD = torch.zeros(1, 4, dtype=torch.float64)
ADV = torch.tensor([[1.0, 1.0, -1.0, -1.0]], dtype=torch.float64)


def test_ppo_clip_hand_computed() -> None:
    # t0: A=1,  r=1.5: max(-1.5, -1.28) = -1.28       (clipped high)
    # t1: A=1,  r=0.9: max(-0.9, -0.9)  = -0.9
    # t2: A=-1, r=0.5: max(0.5, 0.8)    = 0.8; min(0.8, 3) = 0.8   (clipped low)
    # t3: A=-1, r=4.0: max(4.0, 1.28)   = 4.0; min(4.0, 3) = 3.0   (dual clip)
    # approx_kl = mean(-log r) = -(ln 1.5 + ln 0.9 + ln 0.5 + ln 4) / 4 = -0.248313
    out = ppo_clip_loss(LOGP, OLD, ADV, torch.ones(1, 4), clip_low=0.2, clip_high=0.28)
    assert torch.allclose(out.loss, torch.tensor([[-1.28, -0.9, 0.8, 3.0]], dtype=torch.float64))
    assert out.clip_frac_high.item() == pytest.approx(0.25)
    assert out.clip_frac_low.item() == pytest.approx(0.25)
    assert out.dual_clip_frac.item() == pytest.approx(0.25)
    assert out.approx_kl.item() == pytest.approx(-0.248313, abs=1e-6)


def test_ppo_clip_without_dual_clip_and_masked_token() -> None:
    out = ppo_clip_loss(
        LOGP, OLD, ADV, torch.tensor([[1, 1, 1, 0]]), clip_low=0.2, clip_high=0.28, dual_clip=None
    )
    # t3 is masked: loss 0 there and excluded from the statistics (3 tokens)
    assert torch.allclose(out.loss, torch.tensor([[-1.28, -0.9, 0.8, 0.0]], dtype=torch.float64))
    assert out.clip_frac_high.item() == pytest.approx(1 / 3) and out.dual_clip_frac.item() == 0.0
    unmasked = ppo_clip_loss(LOGP, OLD, ADV, torch.ones(1, 4), clip_low=0.2, clip_high=0.28, dual_clip=None)
    assert unmasked.loss[0, 3].item() == pytest.approx(4.0)


def test_ppo_clip_gradient_flows_only_through_unclipped_tokens() -> None:
    # d loss / d logp = -A·r where unclipped (t1: -0.9), 0 where clipped or dual-clipped
    logp = LOGP.clone().requires_grad_(True)
    ppo_clip_loss(logp, OLD, ADV, torch.ones(1, 4), clip_low=0.2, clip_high=0.28).loss.sum().backward()
    assert logp.grad is not None
    assert torch.allclose(logp.grad, torch.tensor([[0.0, -0.9, 0.0, 0.0]], dtype=torch.float64))


def test_ppo_clip_sequence_advantages_broadcast_and_log_ratio_clamp() -> None:
    out = ppo_clip_loss(
        torch.tensor([[50.0, 0.0]]), torch.zeros(1, 2), torch.tensor([-1.0]), torch.ones(1, 2)
    )
    # log ratio 50 is clamped to 20 -> r = e^20; A = -1: max(e^20, 1.2) capped by dual clip at 3
    assert torch.isfinite(out.loss).all() and out.loss[0, 0].item() == pytest.approx(3.0)
    assert out.approx_kl.item() == pytest.approx(-10.0)
    with pytest.raises(InvalidInputError, match="dual_clip must be > 1"):
        ppo_clip_loss(LOGP, OLD, ADV, torch.ones(1, 4), dual_clip=0.5)
    with pytest.raises(InvalidInputError, match="do not fit"):
        ppo_clip_loss(LOGP, OLD, torch.zeros(1, 1, 4), torch.ones(1, 4))


def _verl_vanilla(logp: Tensor, old: Tensor, adv: Tensor, low: float, high: float, c: float) -> Tensor:
    """verl compute_policy_loss_vanilla, as verl writes it."""
    ratio = torch.exp(torch.clamp(logp - old, -20, 20))
    l1, l2 = -adv * ratio, -adv * torch.clamp(ratio, 1 - low, 1 + high)
    clipped = torch.max(l1, l2)
    dual = torch.min(-adv * c, clipped)
    return torch.where(adv < 0, dual, clipped)


def _trl_per_token(logp: Tensor, old: Tensor, adv: Tensor, eps_low: float, eps_high: float) -> Tensor:
    """TRL GRPOTrainer._compute_loss per-token loss (beta = 0), as TRL writes it."""
    coef_1 = torch.exp(logp - old)
    coef_2 = torch.clamp(coef_1, 1 - eps_low, 1 + eps_high)
    return -torch.min(coef_1 * adv, coef_2 * adv)


@pytest.mark.parametrize("seed", range(5))
def test_ppo_clip_equals_verl_and_trl_formulas(seed: int) -> None:
    logp, old, adv, _ = _random_batch(seed)
    ones = torch.ones_like(logp)
    ours = ppo_clip_loss(logp, old, adv, ones, clip_low=0.2, clip_high=0.28, dual_clip=3.0).loss
    assert torch.allclose(ours, _verl_vanilla(logp, old, adv, 0.2, 0.28, 3.0), atol=1e-12)
    ours_trl = ppo_clip_loss(logp, old, adv, ones, clip_low=0.2, clip_high=0.28, dual_clip=None).loss
    assert torch.allclose(ours_trl, _trl_per_token(logp, old, adv, 0.2, 0.28), atol=1e-12)


# --- GSPO -----------------------------------------------------------------------------------


def test_gspo_hand_computed_value_and_gradient() -> None:
    # log ratios 0.2, -0.1 -> mean 0.05 -> s = e^0.05 = 1.051271; A = 1, clip 0.2: unclipped
    # loss per token = -s; d loss_t / d logp_t = -s (token-combined form)
    logp = torch.tensor([[0.2, -0.1]], dtype=torch.float64, requires_grad=True)
    out = gspo_loss(
        logp,
        torch.zeros(1, 2, dtype=torch.float64),
        torch.tensor([1.0]),
        torch.ones(1, 2),
        clip_low=0.2,
        clip_high=0.2,
    )
    s = math.exp(0.05)
    assert torch.allclose(out.loss, torch.tensor([[-s, -s]], dtype=torch.float64))
    out.loss.sum().backward()
    assert logp.grad is not None and torch.allclose(logp.grad, torch.tensor([[-s, -s]], dtype=torch.float64))
    # GSPO's default clip (3e-4, 4e-4): s = 1.0513 > 1.0004 is clipped, loss -1.0004, no gradient
    clipped = gspo_loss(torch.tensor([[0.2, -0.1]]), torch.zeros(1, 2), torch.tensor([1.0]), torch.ones(1, 2))
    assert torch.allclose(clipped.loss, torch.tensor([[-1.0004, -1.0004]])) and clipped.clip_frac_high == 1.0


def test_gspo_gradient_equals_trl_sequence_level_after_seq_mean_token_mean() -> None:
    logp0, old, _, mask = _random_batch(3)
    adv = torch.randn(logp0.shape[0], dtype=torch.float64)
    ours_p = logp0.clone().requires_grad_(True)
    ours = aggregate(
        gspo_loss(ours_p, old, adv, mask, clip_low=10.0, clip_high=10.0).loss, mask, "seq-mean-token-mean"
    )
    ours.backward()
    trl_p = logp0.clone().requires_grad_(True)
    # TRL importance_sampling_level="sequence": coef_1 = exp(masked seq-mean(log_ratio)), grpo loss
    log_w = ((trl_p - old) * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
    per_token = -torch.exp(log_w).unsqueeze(-1) * adv.unsqueeze(-1) * torch.ones_like(trl_p)
    trl = ((per_token * mask).sum(-1) / mask.sum(-1)).mean()
    trl.backward()
    assert torch.allclose(ours, trl) and ours_p.grad is not None and trl_p.grad is not None
    assert torch.allclose(ours_p.grad, trl_p.grad, atol=1e-12)


# --- aggregation: hand-computed -------------------------------------------------------------

LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 9.0, 9.0]])
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected"),
    [
        ("token-mean", {}, 2.5),  # (1 + 2 + 3 + 4) / 4 tokens
        ("seq-mean-token-mean", {}, 3.0),  # (6/3 + 4/1) / 2 seqs
        ("seq-mean-token-sum", {}, 5.0),  # (6 + 4) / 2 seqs
        ("seq-mean-token-sum-norm", {}, 10 / 6),  # 10 / (L=3 · 2 seqs)
        ("seq-mean-token-sum-norm", {"max_len": 10}, 0.5),  # 10 / (10 · 2)
        ("token-mean", {"global_tokens": 20}, 0.5),  # 10 / 20
        ("seq-mean-token-mean", {"global_seqs": 4}, 1.5),  # 6 / 4
    ],
)
def test_aggregate_hand_computed(mode: str, kwargs: dict[str, int], expected: float) -> None:
    assert aggregate(LOSS, MASK, mode, **kwargs).item() == pytest.approx(expected)


def test_aggregate_empty_rows_are_not_sequences_and_errors() -> None:
    mask = torch.tensor([[1, 1, 1], [0, 0, 0]])
    assert aggregate(LOSS, mask, "seq-mean-token-mean").item() == pytest.approx(2.0)  # 6/3 over 1 seq
    assert aggregate(LOSS, torch.zeros(2, 3), "token-mean").item() == 0.0
    assert batch_counts(mask) == (3, 1)
    with pytest.raises(RegistryError, match="did you mean 'token-mean'"):
        aggregate(LOSS, MASK, "token_mean")
    with pytest.raises(InvalidInputError, match="global_tokens must be > 0"):
        aggregate(LOSS, MASK, "token-mean", global_tokens=0)
    with pytest.raises(InvalidInputError, match="one shape"):
        aggregate(LOSS, MASK[:, :2], "token-mean")
    assert set(LOSS_AGGREGATIONS.names()) == set(MODES)
    assert POLICY_LOSSES.get("ppo_clip") is ppo_clip_loss and POLICY_LOSSES.get("gspo") is gspo_loss


# --- aggregation: verl and TRL formulas, literally -------------------------------------------


def _verl_agg(
    loss: Tensor, mask: Tensor, mode: str, tokens: float, seqs: float, dp: int, factor: int
) -> Tensor:
    """verl agg_loss (counts over the whole mini-batch, all ranks)."""
    if mode == "token-mean":
        return (loss * mask).sum() / tokens * dp
    if mode == "seq-mean-token-sum":
        return (loss * mask).sum(-1).sum() / seqs * dp
    if mode == "seq-mean-token-mean":
        return ((loss * mask).sum(-1) / mask.sum(-1)).sum() / seqs * dp
    return (loss * mask).sum() / factor  # seq-mean-token-sum-norm


@pytest.mark.parametrize("seed", range(4))
def test_aggregate_equals_trl_loss_types(seed: int) -> None:
    _, _, loss, mask = _random_batch(seed)
    b, max_completion_length = loss.shape
    grpo = ((loss * mask).sum(-1) / mask.sum(-1)).mean()
    bnpo = (loss * mask).sum() / mask.sum()
    dr_grpo = (loss * mask).sum() / (b * max_completion_length)
    num_items_in_batch = mask.sum() * 3  # dapo: active tokens of the whole accumulated batch
    dapo = (loss * mask).sum() / num_items_in_batch
    assert torch.allclose(aggregate(loss, mask, "seq-mean-token-mean"), grpo)
    assert torch.allclose(aggregate(loss, mask, "token-mean"), bnpo)
    assert torch.allclose(
        aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=max_completion_length), dr_grpo
    )
    assert torch.allclose(aggregate(loss, mask, "token-mean", global_tokens=num_items_in_batch), dapo)


@pytest.mark.parametrize("mode", MODES)
def test_aggregate_equals_verl_agg_loss_across_data_parallel_ranks(mode: str) -> None:
    _, _, loss, mask = _random_batch(11, b=6)
    tokens, seqs = batch_counts(mask)
    factor = 40  # configured max response length
    full = aggregate(loss, mask, mode, max_len=factor)
    ours_ranks, verl_ranks = [], []
    for rank in range(2):  # dp_size 2; DDP then averages the ranks' gradients
        part = slice(3 * rank, 3 * rank + 3)
        ours_ranks.append(
            aggregate(
                loss[part],
                mask[part],
                mode,
                global_tokens=tokens,
                global_seqs=seqs,
                max_len=factor,
                world_size=2,
            )
        )
        verl_ranks.append(_verl_agg(loss[part], mask[part], mode, tokens, seqs, 2, factor))
    ours_ddp = torch.stack(ours_ranks).sum() / 2
    assert torch.allclose(ours_ddp, full)
    if mode == "seq-mean-token-sum-norm":
        # verl's agg_loss divides by the factor only; the 1/B comes from dp_actor's
        # micro-batch scaling, so ours = verl / number of sequences
        for o, v in zip(ours_ranks, verl_ranks, strict=True):
            assert torch.allclose(o, v * 2 / seqs)
    else:
        for o, v in zip(ours_ranks, verl_ranks, strict=True):
            assert torch.allclose(o, v)


# --- micro-batch invariance (property) ------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    b=st.integers(1, 8),
    length=st.integers(1, 6),
    cut=st.lists(st.integers(1, 7), max_size=3),
    mode=st.sampled_from(MODES),
)
def test_micro_batches_with_global_normalisers_equal_full_batch(
    seed: int, b: int, length: int, cut: list[int], mode: str
) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, length, generator=g, dtype=torch.float64)
    mask = (torch.rand(b, length, generator=g) < 0.6).to(torch.float64)  # rows may be empty
    tokens, seqs = batch_counts(mask)
    if tokens == 0:
        return
    w_full = x.clone().requires_grad_(True)
    full = aggregate(w_full.square(), mask, mode, max_len=8)
    full.backward()
    w_mb = x.clone().requires_grad_(True)
    bounds = sorted({0, b, *[c for c in cut if c < b]})
    total = torch.zeros((), dtype=torch.float64)
    for lo, hi in itertools.pairwise(bounds):
        part = aggregate(
            w_mb[lo:hi].square(), mask[lo:hi], mode, global_tokens=tokens, global_seqs=seqs, max_len=8
        )
        part.backward()  # gradient accumulation
        total = total + part.detach()
    assert torch.allclose(total, full.detach(), atol=1e-12)
    assert w_full.grad is not None and w_mb.grad is not None
    assert torch.allclose(w_mb.grad, w_full.grad, atol=1e-12)


# --- EVisRAG router (per-scope) aggregation ----------------------------------------------------


def _upstream_router(loss: Tensor, masks: Tensor, total_tokens: Tensor, world: int = 1) -> Tensor:
    """EVisRAG dp_actor: average_loss(mode="router") then the per-scope combination
    Σ_k loss_k·tokens_k·world/total_tokens_k / #(loss_k != 0) (EVisRAG's released router loss)."""
    per_scope = (loss * masks).sum(dim=(0, 2)) / (masks.sum(dim=(0, 2)) + 1e-8)
    return (per_scope * masks.sum(dim=(0, 2)) * world / total_tokens).sum() / (per_scope != 0.0).sum()


def test_aggregate_scoped_hand_computed() -> None:
    # scope 0: tokens with loss 1, 2 (row 0) and 3 (row 1) -> mean 2
    # scope 1: tokens with loss 4 (row 0) and 0 (row 1)     -> mean 2
    # upstream: (2·3/3 + 2·2/2) / 2 non-zero scopes = 2
    loss = torch.tensor([[[1.0, 2.0, 0.0], [0.0, 0.0, 4.0]], [[3.0, 0.0, 0.0], [0.0, 0.0, 0.0]]])
    masks = torch.tensor([[[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert aggregate_scoped(loss, masks).item() == pytest.approx(2.0)
    # with 6 scope-0 tokens and 4 scope-1 tokens in the full batch: (6/6 + 4/4) / 2 = 1
    assert aggregate_scoped(
        loss, masks, global_scope_tokens=torch.tensor([6.0, 4.0])
    ).item() == pytest.approx(1.0)


def test_aggregate_scoped_equals_upstream_per_micro_batch_and_is_exact_with_global_count() -> None:
    g = torch.Generator().manual_seed(0)
    logp, old = -torch.rand(6, 1, 5, generator=g), -torch.rand(6, 1, 5, generator=g)
    adv = torch.randn(6, 3, generator=g)
    adv[:3, 2] = 0.0  # scope 2 has no signal in the first micro-batch
    masks = (torch.rand(6, 3, 5, generator=g) < 0.7).float()
    loss = ppo_clip_loss(logp, old, adv.unsqueeze(-1), masks).loss  # (B, K, L) per-scope losses
    total = masks.sum(dim=(0, 2))
    for part in (slice(0, 3), slice(3, 6)):
        ours = aggregate_scoped(loss[part], masks[part], global_scope_tokens=total)
        assert torch.allclose(ours, _upstream_router(loss[part], masks[part], total), atol=1e-6)
    n_active = active_scope_count(adv, masks)
    assert n_active == 3
    full = aggregate_scoped(loss, masks, active_scopes=n_active)
    parts = torch.stack(
        [
            aggregate_scoped(loss[p], masks[p], global_scope_tokens=total, active_scopes=n_active)
            for p in (slice(0, 3), slice(3, 6))
        ]
    ).sum()
    assert torch.allclose(parts, full, atol=1e-6)


def test_aggregate_scoped_empty_scope_is_zero_not_nan() -> None:
    loss = torch.ones(1, 2, 2)
    masks = torch.tensor([[[1.0, 1.0], [0.0, 0.0]]])
    assert aggregate_scoped(loss, masks).item() == pytest.approx(1.0)
    with pytest.raises(InvalidInputError, match=r"\(B, K, L\)"):
        aggregate_scoped(loss[0], masks[0])


# --- upstream RS-GRPO pipeline on recorded inputs ----------------------------------------------


def _upstream_compute_policy_loss(
    logp: Tensor, old: Tensor, adv: Tensor, masks: Tensor, low: float, high: float, dual: float
) -> Tensor:
    """EVisRAG core_algos.compute_policy_loss (router), re-implemented from its formulas: per-scope
    advantages times masks, log-space ratio clipping, dual clip, then average_loss "router"."""
    a = adv.unsqueeze(-1) * masks  # (B, K, L)
    nak = torch.clamp(logp - old, -20.0, 20.0).unsqueeze(-2).repeat(1, a.size(1), 1)
    ratio = torch.exp(nak)
    clipped_ratio = torch.exp(torch.clamp(nak, math.log(1.0 - low), math.log(1.0 + high)))
    higher = torch.max(-a * ratio, -a * clipped_ratio)
    final = torch.where(a < 0, torch.min(higher, -a * dual), higher)
    return (final * masks).sum(dim=(0, 2)) / (masks.sum(dim=(0, 2)) + 1e-8)  # (K,)


def test_router_pipeline_on_recorded_scope_masks_and_advantages() -> None:
    folder = Path(__file__).resolve().parents[1] / "fixtures" / "conformance"
    scope_cases = json.loads((folder / "evisrag_scope_masks.json").read_text())["cases"]
    router_cases = json.loads((folder / "evisrag_router_advantage.json").read_text())["cases"]
    names = ["accuracy", "evidence", "format", "overlong", "isObserve", "isThink"]  # sum_all order
    case = next(c for c in router_cases if len(c["args"][0]) == 8 and len(c["args"][0][0]) == 6)
    adv = router_advantages(torch.tensor(case["args"][0]), index=case["args"][1])  # (8, 6)
    rows = [scope_cases[i % len(scope_cases)]["output"] for i in range(8)]
    length = max(len(r["format"]) for r in rows)
    masks = torch.zeros(8, 6, length)  # (B, K, L) recorded upstream masks, right-padded
    for b, row in enumerate(rows):
        for k, name in enumerate(names):
            masks[b, k, : len(row[name])] = torch.tensor(row[name], dtype=torch.float32)
    g = torch.Generator().manual_seed(1)
    logp, old = -torch.rand(8, length, generator=g), -torch.rand(8, length, generator=g)
    total = masks.sum(dim=(0, 2))
    for part in (slice(0, 4), slice(4, 8)):  # two micro-batches of one mini-batch
        per_scope = _upstream_compute_policy_loss(
            logp[part], old[part], adv[part], masks[part], 0.2, 0.28, 3.0
        )
        upstream = (per_scope * masks[part].sum(dim=(0, 2)) / total).sum() / (per_scope != 0.0).sum()
        loss = ppo_clip_loss(
            logp[part].unsqueeze(1),
            old[part].unsqueeze(1),
            adv[part].unsqueeze(-1),
            masks[part],
            clip_high=0.28,
        ).loss  # (B, K, L)
        ours = aggregate_scoped(loss, masks[part], global_scope_tokens=total)
        assert torch.allclose(ours, upstream, atol=1e-6)
