"""The policy update of one RL step over micro-batches, exactly equal to the full batch.

Each micro-batch is collated on its own (its own padding), but the loss uses the token and
sequence counts of the *whole* batch (summed over processes), so the accumulated gradient is
the full-batch gradient whatever the micro-batch size (``rl.losses.aggregate``).

With ``ScopedAdvantages`` (EVisRAG's released router) the loss is taken per scope instead: each
scope's clipped loss is a token mean over that scope's tokens of the whole batch, and the scopes
are averaged over those with a non-zero advantage (``rl.losses.aggregate_scoped``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal, overload

from evidra.core.errors import InvalidInputError
from evidra.models.context import Context, collate_split
from evidra.models.generation import forward_logprobs
from evidra.models.loading import VLM
from evidra.models.prefix import PREFIX_ARCHS, PrefixBatch, build_prefix_batch, prefix_logprobs
from evidra.rl.algo.advantages import ScopedAdvantages
from evidra.rl.algo.kl import kl_penalty
from evidra.rl.algo.losses import POLICY_LOSSES, aggregate, aggregate_scoped
from evidra.rl.algo.mismatch import combined, logprob_mismatch
from evidra.rl.parallel.processes import Engine
from evidra.rl.policy import Reference
from evidra.rollout import Episode

if TYPE_CHECKING:
    import torch
    from torch import Tensor

    from evidra.models.hf_types import HFModel, ModelInputs


@dataclass(frozen=True)
class UpdateSettings:
    policy_loss: str = "ppo_clip"
    loss_agg: str = "token-mean"
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    ppo_epochs: int = 1
    max_grad_norm: float = 1.0
    temperature: float = 1.0
    max_len: int | None = None  # Dr.GRPO's constant (seq-mean-token-sum-norm)
    old_logprobs: str = "auto"  # auto | recompute | sampler (see AlgoConfig.old_logprobs)
    tis_cap: float = 0.0  # truncated importance-sampling cap against sampler mismatch; 0: off


@dataclass(eq=False)
class MicroBatch:
    rows: slice  # which episodes of the step these are
    inputs: ModelInputs | None  # plain path: prompts left-padded, responses right-padded
    prefix: PrefixBatch | None  # shared-prompt path (single-turn responses without images)
    response_ids: Tensor  # (b, R)
    loss_mask: Tensor  # (b, R): 1 on policy tokens, 0 on padding and observations
    old_logprobs: Tensor  # (b, R): the clipped ratio's "old" log-probs, 0 off the mask
    sampler_logprobs: Tensor  # (b, R): the sampling engine's log-probs of the same tokens
    advantages: Tensor | None = None  # (b, R), from the step's (N, L) token advantages; (b, K, R) per scope
    padding: bool = False  # an empty copy that only keeps sharded processes in step
    scope_masks: Tensor | None = None  # (b, K, R) with per-scope advantages: the loss is taken per scope

    @overload
    def logprobs(
        self, model: HFModel, temperature: float, *, with_entropy: Literal[False] = ...
    ) -> Tensor: ...
    @overload
    def logprobs(
        self, model: HFModel, temperature: float, *, with_entropy: Literal[True]
    ) -> tuple[Tensor, Tensor]: ...
    def logprobs(
        self, model: HFModel, temperature: float, *, with_entropy: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Log-probs (b, R) of the responses under ``model`` (and entropies if asked)."""
        if self.prefix is not None:
            return prefix_logprobs(model, self.prefix, temperature, with_entropy=with_entropy)
        assert self.inputs is not None
        return forward_logprobs(model, self.inputs, self.response_ids, temperature, with_entropy=with_entropy)

    def set_advantages(self, all_rows: Tensor | ScopedAdvantages) -> None:
        """Take this micro-batch's rows of the step's ``(N, L)`` advantages (or of its
        ``ScopedAdvantages``, with their scope masks), cut or padded to its width."""
        width, device = self.loss_mask.shape[1], self.loss_mask.device
        if isinstance(all_rows, ScopedAdvantages):
            self.advantages = _width(all_rows.values[self.rows], width).to(device)  # (b, K, R)
            self.scope_masks = _width(all_rows.masks[self.rows], width).to(device)  # (b, K, R)
            return
        self.advantages = _width(all_rows[self.rows], width).to(device)  # (b, R)


def _width(x: Tensor, width: int) -> Tensor:
    """``x`` cut or zero-padded to ``width`` along its last dimension."""
    import torch.nn.functional as F

    return x[..., :width] if x.shape[-1] >= width else F.pad(x, (0, width - x.shape[-1]))


def _checkpointing(model: HFModel) -> bool:
    """Whether activation checkpointing is on (``is_activation_checkpointing`` from transformers
    5.24, ``is_gradient_checkpointing`` before)."""
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        value = getattr(model, name, None)  # a LoRA wrapper forwards to the base model
        if value is not None:
            return bool(value)
    return False


def _shared_prompts(vlm: VLM, chunk: Sequence[Episode]) -> tuple[list[Context], list[int]] | None:
    """Distinct prompts of a chunk and each episode's prompt index; None if one cannot share."""
    if vlm.arch not in PREFIX_ARCHS or _checkpointing(vlm.model):
        return None  # the shared-prompt pass needs the KV cache, which checkpointed training turns off
    keys: dict[tuple[int, tuple[int, ...]], int] = {}
    prompts: list[Context] = []
    index = []
    for ep in chunk:
        t = ep.trajectory
        if vlm.image_token_id in t.token_ids:  # images inside the response: plain path
            return None
        key = (ep.group, t.prompt_ids)
        if key not in keys:
            keys[key] = len(prompts)
            c = ep.context
            prompts.append(Context(t.prompt_ids, c.pixel_values, c.image_grid_thw, c.images))
        index.append(keys[key])
    return (prompts, index) if len(prompts) < len(chunk) else None


def episode_tensors(
    vlm: VLM, episodes: Sequence[Episode], micro_batch_size: int, offset: int = 0
) -> list[MicroBatch]:
    """Collate episodes into micro-batches of model inputs and aligned per-token tensors.

    Groups of single-turn episodes share their prompt (``models.prefix``): it is encoded once
    per micro-batch instead of once per episode. ``offset`` is the step-wide index of
    ``episodes[0]`` (a mini-batch's rows among the step's).
    """
    import torch

    out = []
    device = vlm.device
    for start in range(0, len(episodes), micro_batch_size):
        chunk = episodes[start : start + micro_batch_size]
        shared = _shared_prompts(vlm, chunk)
        inputs, prefix = None, None
        if shared is not None:
            responses = [ep.trajectory.token_ids for ep in chunk]
            prefix = build_prefix_batch(shared[0], shared[1], responses, vlm.pad_token_id, vlm.image_token_id)
            prefix.prompt_inputs = {
                k: v.to(device) if hasattr(v, "to") else v for k, v in prefix.prompt_inputs.items()
            }
            ids, pad_mask = prefix.response_ids.to(device), prefix.response_mask
            prefix.response_ids, prefix.response_mask = ids, pad_mask.to(device)
        else:
            prompt_lens = [len(ep.trajectory.prompt_ids) for ep in chunk]
            contexts = [ep.context for ep in chunk]
            plain, ids, pad_mask = collate_split(contexts, prompt_lens, vlm.pad_token_id, vlm.image_token_id)
            inputs = {k: v.to(device) if hasattr(v, "to") else v for k, v in plain.items()}
            ids = ids.to(device)
        mask = torch.zeros(pad_mask.shape, dtype=torch.float32)  # (b, R)
        old = torch.zeros_like(mask)  # (b, R)
        for i, ep in enumerate(chunk):
            t = ep.trajectory
            mask[i, : len(t.policy_mask)] = torch.tensor(t.policy_mask, dtype=torch.float32)
            old[i, : len(t.logprobs)] = torch.tensor(t.logprobs, dtype=torch.float32)
        rows = slice(offset + start, offset + start + len(chunk))
        old = old.to(device)
        out.append(MicroBatch(rows, inputs, prefix, ids, mask.to(device), old, old))
    return out


def reference_logprobs(
    reference: Reference, batches: Sequence[MicroBatch], temperature: float, engine: Engine | None = None
) -> list[Tensor]:
    """Reference-policy log-probs ``(b, R)`` per micro-batch, without gradients."""
    import torch

    out = []
    with engine.no_autograd() if engine is not None else torch.no_grad(), reference.active() as model:
        for mb in batches:
            with engine.autocast() if engine is not None else nullcontext():
                out.append(mb.logprobs(model, temperature).float())
    return [lp.clone() for lp in out]  # normal tensors: the KL term uses them under autograd


@dataclass(frozen=True)
class _Counts:
    """A mini-batch's normalisers, summed over its micro-batches and processes."""

    tokens: Tensor  # () masked tokens
    seqs: Tensor  # () sequences with at least one masked token
    scope_tokens: Tensor | None = None  # (K,) masked tokens of each scope (per-scope loss only)
    active_scopes: int = 0  # scopes with a non-zero advantage on one of their tokens


def _row_mask(mb: MicroBatch, valid: Tensor) -> Tensor:
    """(b, R): policy tokens of the scored episodes."""
    return mb.loss_mask * valid[mb.rows].to(mb.loss_mask)[:, None]


def _global_counts(batches: Sequence[MicroBatch], valid: Tensor, engine: Engine) -> _Counts:
    import torch

    tokens = torch.zeros((), device=batches[0].loss_mask.device)
    seqs = torch.zeros((), device=tokens.device)
    for mb in batches:
        lengths = _row_mask(mb, valid).sum(-1)  # (b,)
        tokens += lengths.sum()
        seqs += (lengths > 0).sum()
    if batches[0].scope_masks is None:
        return _Counts(engine.sum(tokens), engine.sum(seqs))
    k = batches[0].scope_masks.shape[1]
    scope_tokens = torch.zeros(k, device=tokens.device)  # (K,)
    hit = torch.zeros(k, device=tokens.device)  # (K,)
    for mb in batches:
        assert mb.scope_masks is not None  # set_advantages gives every micro-batch of a step scopes
        m = mb.scope_masks * _row_mask(mb, valid)[:, None]  # (b, K, R)
        scope_tokens += m.sum(dim=(0, 2))
        hit += ((mb.advantages != 0) & (m > 0)).any(dim=2).any(dim=0).float()
    active = int((engine.sum(hit) > 0).sum())  # losses.active_scope_count over the whole mini-batch
    return _Counts(engine.sum(tokens), engine.sum(seqs), engine.sum(scope_tokens), active)


def recompute_old_logprobs(
    model: HFModel, minibatches: Sequence[Sequence[MicroBatch]], temperature: float, engine: Engine
) -> None:
    """Replace every micro-batch's old log-probs by the trainer's own, before any update.

    Needed whenever the sampler's can differ from what the trainer computes: several optimizer
    steps per batch (the later steps' "old" policy is the pre-update one), bf16 compute, another
    generation engine. The sampler's stay in ``sampler_logprobs`` for the mismatch metrics and
    the truncated importance-sampling correction.
    """
    computed = []
    with engine.no_autograd():
        for batches in minibatches:
            for mb in batches:
                with engine.autocast():
                    computed.append((mb, mb.logprobs(model, temperature)))  # (b, R)
    for mb, logp in computed:  # outside: normal tensors, which the loss uses under autograd
        mb.old_logprobs = (logp.float() * mb.loss_mask).detach()


def mismatch_stats(batches: Sequence[Sequence[MicroBatch]]) -> dict[str, float]:
    """Mean and max ``|trainer - sampler|`` log-prob over policy tokens (after a recompute)."""
    parts = [
        logprob_mismatch(mb.sampler_logprobs, mb.old_logprobs, mb.loss_mask) for g in batches for mb in g
    ]
    return combined(parts).metrics()


def _lift(x: Tensor, mb: MicroBatch) -> Tensor:
    """``x`` (b, R) as (b, 1, R) when ``mb`` takes its loss per scope, to broadcast over scopes."""
    return x if mb.scope_masks is None else x.unsqueeze(1)


def _micro_loss(
    model: HFModel,
    mb: MicroBatch,
    mask: Tensor,
    ref: Tensor | None,
    s: UpdateSettings,
    stats: _Stats,
    on_policy: bool,
) -> Tensor:
    """Per-token loss (b, R) of one micro-batch: clipped surrogate (+ TIS weight) (+ KL); (b, K, R),
    one row per scope, with per-scope advantages."""
    import torch

    assert mb.advantages is not None  # policy_update refuses micro-batches without advantages
    loss_fn = POLICY_LOSSES.get(s.policy_loss)
    logp, entropy = mb.logprobs(model, s.temperature, with_entropy=True)  # (b, R) each
    if on_policy:  # one optimizer step per batch: the old policy is this one, exactly
        mb.old_logprobs = (logp.detach().float() * mb.loss_mask).detach()
        gap = logprob_mismatch(mb.sampler_logprobs, mb.old_logprobs, mb.loss_mask)
        if gap.tokens:  # how far the sampler's log-probs were from the trainer's (bf16, kernels)
            stats.mean("mismatch/logp_abs_mean", gap.mean_abs)
            stats.peak("mismatch/logp_abs_max", gap.max_abs)
    # per scope: (b, 1, R) log-probs against (b, K, R) advantages and masks give (b, K, R) losses
    loss_mask = mask if mb.scope_masks is None else mb.scope_masks * mask.unsqueeze(1)
    out = loss_fn(
        _lift(logp, mb),
        _lift(mb.old_logprobs, mb),
        mb.advantages,
        loss_mask,
        clip_low=s.clip_low,
        clip_high=s.clip_high,
        dual_clip=s.dual_clip,
    )
    per_token = out.loss  # (b, R) or (b, K, R)
    if s.tis_cap > 0:  # verl's truncated IS: weight by min(pi_old / pi_sampler, cap), no gradient
        weight = torch.exp(mb.old_logprobs - mb.sampler_logprobs).clamp(max=s.tis_cap).detach()  # (b, R)
        per_token = per_token * _lift(weight, mb)
        stats.mean("tis/weight_mean", float((weight * mask).sum() / mask.sum().clamp(min=1)))
    if ref is not None and s.kl_coef:  # per scope: averaged over each scope's tokens
        kld = kl_penalty(logp, ref, s.kl_estimator) * mask  # (b, R)
        per_token = per_token + s.kl_coef * _lift(kld, mb)
        stats.mean("kl", float((kld.sum() / mask.sum().clamp(min=1)).detach()))
    stats.mean("clip/low", float(out.clip_frac_low))
    stats.mean("clip/high", float(out.clip_frac_high))
    stats.mean("clip/dual", float(out.dual_clip_frac))
    stats.mean("approx_kl", float(out.approx_kl))
    stats.mean("entropy", float((entropy * mask).sum() / mask.sum().clamp(min=1)))
    return per_token


def policy_update(
    model: HFModel,
    optimizer: torch.optim.Optimizer,
    engine: Engine,
    batches: Sequence[MicroBatch] | Sequence[Sequence[MicroBatch]],
    valid: Tensor,
    ref: Sequence[Tensor] | None,
    s: UpdateSettings,
) -> dict[str, float]:
    """``ppo_epochs`` passes over the mini-batches, one optimizer step per mini-batch.

    ``batches`` is a list of mini-batches, each a list of micro-batches (a flat list of
    micro-batches is one mini-batch). Each mini-batch's loss uses that mini-batch's global
    token / sequence counts, so its micro-batches accumulate to the mini-batch gradient. With a
    single optimizer step the old log-probs are the current ones (exactly on-policy, ``auto``);
    otherwise they must have been recomputed before (:func:`recompute_old_logprobs`) or are the
    sampler's (``old_logprobs="sampler"``). ``ref`` holds the reference log-probs per micro-batch,
    in the same order as the flattened mini-batches.
    """
    minibatches = _as_minibatches(batches)
    flat = [mb for group in minibatches for mb in group]
    if any(mb.advantages is None for mb in flat):
        raise InvalidInputError("set every micro-batch's advantages before the update")
    ref_of = {id(mb): r for mb, r in zip(flat, ref, strict=True)} if ref is not None else {}
    on_policy = s.old_logprobs == "auto" and s.ppo_epochs * len(minibatches) == 1
    steps = s.ppo_epochs * len(minibatches)
    stats = _Stats()
    for _epoch in range(s.ppo_epochs):
        for group in minibatches:
            counts = _global_counts(group, valid, engine)
            if (
                float(counts.tokens) == 0
            ):  # every episode unscored (e.g. the judge was down): nothing to learn
                stats.total("update/empty_minibatches", 1.0)
                continue
            optimizer.zero_grad(set_to_none=True)
            for i, mb in enumerate(group):
                with nullcontext() if i == len(group) - 1 else engine.no_sync(model):
                    mask = _row_mask(mb, valid)  # (b, R)
                    with engine.autocast():
                        per_token = _micro_loss(model, mb, mask, ref_of.get(id(mb)), s, stats, on_policy)
                    loss = _aggregate(per_token, mask, mb, counts, s, engine.num_processes)
                    engine.backward(loss, model)
                stats.total("loss", float(loss.detach()) / steps)  # micro losses sum to the batch loss
            norm = engine.optimizer_step(model, optimizer, s.max_grad_norm)
            if not math.isfinite(norm):  # a non-finite loss or gradient: never stepped on
                stats.total("update/nonfinite_skips", 1.0)
                continue
            stats.mean("grad_norm", norm)
    done = stats.result()
    skipped = done.get("update/empty_minibatches", 0.0) + done.get("update/nonfinite_skips", 0.0)
    stats.total("optimizer_steps", float(steps) - skipped)
    return stats.result()


def _aggregate(
    per_token: Tensor, mask: Tensor, mb: MicroBatch, counts: _Counts, s: UpdateSettings, world: int
) -> Tensor:
    """The micro-batch's share of the mini-batch loss: ``s.loss_agg`` over its tokens, or with
    per-scope advantages EVisRAG's released per-scope combination (``aggregate_scoped``)."""
    if mb.scope_masks is None:
        return aggregate(
            per_token,
            mask,
            s.loss_agg,
            global_tokens=counts.tokens,
            global_seqs=counts.seqs,
            max_len=s.max_len,
            world_size=world,
        )
    scopes = mb.scope_masks * mask.unsqueeze(1)  # (b, K, R)
    return aggregate_scoped(
        per_token,
        scopes,
        global_scope_tokens=counts.scope_tokens,
        active_scopes=counts.active_scopes,
        world_size=world,
    )


def _as_minibatches(
    batches: Sequence[MicroBatch] | Sequence[Sequence[MicroBatch]],
) -> list[list[MicroBatch]]:
    """A flat list of micro-batches as one mini-batch; a list of mini-batches as it is."""
    flat = [mb for mb in batches if isinstance(mb, MicroBatch)]
    return [flat] if flat else [list(group) for group in batches if not isinstance(group, MicroBatch)]


class _Stats:
    """Running sums (the loss), maxima (``peak``) and means (everything else) of update statistics."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._peaks: dict[str, float] = {}

    def total(self, key: str, value: float) -> None:
        self._sums[key] = self._sums.get(key, 0.0) + value

    def mean(self, key: str, value: float) -> None:
        self.total(key, value)
        self._counts[key] = self._counts.get(key, 0) + 1

    def peak(self, key: str, value: float) -> None:
        self._peaks[key] = max(self._peaks.get(key, value), value)

    def result(self) -> dict[str, float]:
        return {**{k: v / self._counts.get(k, 1) for k, v in self._sums.items()}, **self._peaks}


def empty_like(mb: MicroBatch) -> MicroBatch:
    """A copy of micro-batch ``mb`` whose loss mask is all zero, marked as padding."""
    return replace(mb, loss_mask=mb.loss_mask * 0, padding=True)
