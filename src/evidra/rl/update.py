"""The policy update of one RL step over micro-batches, exactly equal to the full batch.

Each micro-batch is collated on its own (its own padding), but the loss uses the token and
sequence counts of the *whole* batch (summed over processes), so the accumulated gradient is
the full-batch gradient whatever the micro-batch size (``rl.losses.aggregate``).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from evidra.errors import InvalidInputError
from evidra.models.context import Context, collate_split
from evidra.models.generation import forward_logprobs
from evidra.models.loading import VLM
from evidra.models.prefix import PREFIX_ARCHS, PrefixBatch, build_prefix_batch, prefix_logprobs
from evidra.rl.kl import kl_penalty
from evidra.rl.losses import POLICY_LOSSES, aggregate
from evidra.rl.policy import Reference
from evidra.rl.rollout import Episode


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


@dataclass(eq=False)
class MicroBatch:
    rows: slice  # which episodes of the step these are
    inputs: dict[str, Any] | None  # plain path: prompts left-padded, responses right-padded
    prefix: PrefixBatch | None  # shared-prompt path (single-turn responses without images)
    response_ids: Any  # (b, R)
    loss_mask: Any  # (b, R): 1 on policy tokens, 0 on padding and observations
    old_logprobs: Any  # (b, R): sampling log-probs, 0 off the mask
    advantages: Any = None  # (b, R), set from the step's (N, L) token advantages

    def logprobs(self, model: Any, temperature: float, *, with_entropy: bool = False) -> Any:
        """Log-probs (b, R) of the responses under ``model`` (and entropies if asked)."""
        if self.prefix is not None:
            return prefix_logprobs(model, self.prefix, temperature, with_entropy=with_entropy)
        assert self.inputs is not None
        return forward_logprobs(model, self.inputs, self.response_ids, temperature, with_entropy=with_entropy)

    def set_advantages(self, all_rows: Any) -> None:
        """Take this micro-batch's rows of the step's ``(N, L)`` advantages, cut to its width."""
        width = self.loss_mask.shape[1]
        block = all_rows[self.rows, :width]  # (b, <=R)
        if block.shape[1] < width:
            block = torch_pad(block, width)
        self.advantages = block.to(self.loss_mask.device)


def _shared_prompts(vlm: VLM, chunk: Sequence[Episode]) -> tuple[list[Context], list[int]] | None:
    """Distinct prompts of a chunk and each episode's prompt index; None if one cannot share."""
    if vlm.arch not in PREFIX_ARCHS:
        return None
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
            prompts.append(Context(t.prompt_ids, ep.context.pixel_values, ep.context.image_grid_thw))
        index.append(keys[key])
    return (prompts, index) if len(prompts) < len(chunk) else None


def episode_tensors(vlm: VLM, episodes: Sequence[Episode], micro_batch_size: int) -> list[MicroBatch]:
    """Collate episodes into micro-batches of model inputs and aligned per-token tensors.

    Groups of single-turn episodes share their prompt (``models.prefix``): it is encoded once
    per micro-batch instead of once per episode.
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
        rows = slice(start, start + len(chunk))
        out.append(MicroBatch(rows, inputs, prefix, ids, mask.to(device), old.to(device)))
    return out


def torch_pad(x: Any, width: int) -> Any:
    import torch

    return torch.cat([x, x.new_zeros(x.shape[0], width - x.shape[1])], dim=1)


def reference_logprobs(reference: Reference, batches: Sequence[MicroBatch], temperature: float) -> list[Any]:
    """Reference-policy log-probs ``(b, R)`` per micro-batch, without gradients."""
    import torch

    out = []
    with torch.no_grad(), reference.active() as model:
        for mb in batches:
            out.append(mb.logprobs(model, temperature))
    return out


def _global_counts(batches: Sequence[MicroBatch], valid: Any, acc: Any) -> tuple[Any, Any]:
    import torch

    tokens = torch.zeros((), device=batches[0].loss_mask.device)
    seqs = torch.zeros((), device=tokens.device)
    for mb in batches:
        lengths = (mb.loss_mask * valid[mb.rows].to(mb.loss_mask)[:, None]).sum(-1)  # (b,)
        tokens += lengths.sum()
        seqs += (lengths > 0).sum()
    if acc.num_processes > 1:
        tokens, seqs = acc.reduce(tokens, "sum"), acc.reduce(seqs, "sum")
    return tokens, seqs


def policy_update(
    model: Any,
    optimizer: Any,
    acc: Any,
    batches: Sequence[MicroBatch],
    valid: Any,
    ref: Sequence[Any] | None,
    s: UpdateSettings,
) -> dict[str, float]:
    """``ppo_epochs`` optimizer steps over all micro-batches; returns averaged statistics."""

    loss_fn = POLICY_LOSSES.get(s.policy_loss)
    if any(mb.advantages is None for mb in batches):
        raise InvalidInputError("set every micro-batch's advantages before the update")
    tokens, seqs = _global_counts(batches, valid, acc)
    stats = _Stats()
    for _epoch in range(s.ppo_epochs):
        optimizer.zero_grad(set_to_none=True)
        for i, mb in enumerate(batches):
            last = i == len(batches) - 1
            sync = nullcontext() if last or acc.num_processes == 1 else acc.no_sync(model)
            with sync:
                mask = mb.loss_mask * valid[mb.rows].to(mb.loss_mask)[:, None]  # (b, R)
                logp, entropy = mb.logprobs(model, s.temperature, with_entropy=True)  # (b, R) each
                out = loss_fn(
                    logp, mb.old_logprobs, mb.advantages, mask, clip_low=s.clip_low, clip_high=s.clip_high,
                    dual_clip=s.dual_clip,
                )  # fmt: skip
                per_token = out.loss  # (b, R)
                if ref is not None and s.kl_coef:
                    kld = kl_penalty(logp, ref[i], s.kl_estimator) * mask  # (b, R)
                    per_token = per_token + s.kl_coef * kld
                    stats.mean("kl", float((kld.sum() / mask.sum().clamp(min=1)).detach()))
                loss = aggregate(
                    per_token, mask, s.loss_agg, global_tokens=tokens, global_seqs=seqs, max_len=s.max_len,
                    world_size=acc.num_processes,
                )  # fmt: skip
                acc.backward(loss)
            stats.total("loss", float(loss.detach()) / s.ppo_epochs)  # micro losses sum to the batch loss
            stats.mean("clip/low", float(out.clip_frac_low))
            stats.mean("clip/high", float(out.clip_frac_high))
            stats.mean("clip/dual", float(out.dual_clip_frac))
            stats.mean("approx_kl", float(out.approx_kl))
            stats.mean("entropy", float((entropy * mask).sum() / mask.sum().clamp(min=1)))
        norm = acc.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], s.max_grad_norm)
        stats.mean("grad_norm", float(norm))
        optimizer.step()
    return stats.result()


class _Stats:
    """Running sums (for the loss) and means (for everything else) of update statistics."""

    def __init__(self) -> None:
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}

    def total(self, key: str, value: float) -> None:
        self._sums[key] = self._sums.get(key, 0.0) + value

    def mean(self, key: str, value: float) -> None:
        self.total(key, value)
        self._counts[key] = self._counts.get(key, 0) + 1

    def result(self) -> dict[str, float]:
        return {k: v / self._counts.get(k, 1) for k, v in self._sums.items()}
