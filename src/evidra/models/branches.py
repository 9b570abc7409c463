"""Teacher forcing of many short continuations, each after its own prefix of one context, in
one forward pass.

CAVE scores fixed targets (the gold answer, evidence sentences) after every turn boundary of
an episode. Appending each target to its own copy of the prefix re-encodes the context (and its
images, through the vision tower) once per state and target. Here the longest prefix runs once
and every continuation ("branch") is packed behind it in the same sequence: a 4D attention mask
lets a branch see the context up to its own prefix length and its own earlier tokens only, and
each branch's positions continue from the last position of its prefix (3D rope positions from
the model's own ``get_rope_index``). Masked keys get exactly zero attention weight, so each
branch's logits are those of the prefix-plus-branch sequence run alone (tests compare them).

Only ``sdpa`` and ``eager`` attention take such a mask; ``packable`` says whether a model does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.models.context import Context, cat_vision
from evidra.models.loading import VLM
from evidra.models.prefix import _rope_owner

if TYPE_CHECKING:
    from torch import Tensor

    from evidra.models.hf_types import HFModel, ModelInputs


@dataclass(frozen=True)
class Branch:
    """Tokens ``ids`` forced after the first ``prefix_len`` tokens of the context."""

    prefix_len: int
    ids: tuple[int, ...]


def prefix_context(context: Context, length: int, image_token_id: int) -> Context:
    """The first ``length`` tokens of ``context`` with exactly the images they hold.

    Images must be whole inside the prefix (a prefix that ends at a turn boundary), so the
    images are the first ``k`` whose placeholder tokens (grid t*h*w / 4 each) fit in it.
    """
    ids = context.token_ids[:length]
    placeholders = sum(1 for i in ids if i == image_token_id)
    if context.image_grid_thw is None or context.pixel_values is None or placeholders == 0:
        return Context(ids)
    sizes = [int(g.prod()) for g in context.image_grid_thw]  # patches per image
    k, tokens, rows = 0, 0, 0
    while k < len(sizes) and tokens + sizes[k] // 4 <= placeholders:
        tokens, rows, k = tokens + sizes[k] // 4, rows + sizes[k], k + 1
    return Context(ids, context.pixel_values[:rows], context.image_grid_thw[:k], context.images[:k])


def _attention(model: HFModel) -> str:
    config = getattr(model, "config", None)
    text = getattr(config, "text_config", None) or config
    return str(getattr(text, "_attn_implementation", None) or getattr(config, "_attn_implementation", ""))


def packable(vlm: VLM) -> bool:
    """Whether the model's attention takes a custom 4D mask (``sdpa`` or ``eager``)."""
    return _attention(vlm.model) in ("sdpa", "eager")


def _positions(vlm: VLM, head: Context) -> Tensor:
    """Positions ``(3, L)`` of the context tokens (``(1, L)`` for a text-only policy)."""
    import torch

    n = len(head)
    if vlm.image_token_id < 0:
        return torch.arange(n).unsqueeze(0)
    owner = _rope_owner(vlm.model)
    if owner is None or head.image_grid_thw is None:
        return torch.arange(n).expand(3, n)
    ids = torch.tensor([head.token_ids])
    types = (ids == vlm.image_token_id).long()
    pos, _ = owner.get_rope_index(
        ids, types, image_grid_thw=head.image_grid_thw, attention_mask=torch.ones_like(ids)
    )
    return pos[:, 0].cpu()  # (3, L)


def _allowed(length: int, branches: Sequence[Branch]) -> Tensor:
    """``(N, N)`` bool: causal over the context, each branch over its prefix and itself."""
    import torch

    n = length + sum(len(b.ids) for b in branches)
    allowed = torch.zeros(n, n, dtype=torch.bool)
    allowed[:length, :length] = torch.ones(length, length, dtype=torch.bool).tril()
    start = length
    for b in branches:
        end = start + len(b.ids)
        allowed[start:end, : b.prefix_len] = True
        allowed[start:end, start:end] = torch.ones(end - start, end - start, dtype=torch.bool).tril()
        start = end
    return allowed


@dataclass(frozen=True, eq=False)
class Packed:
    """One episode's row: the longest prefix, then every branch; ``keep[k]`` is the position
    whose logits predict ``targets[k]`` (branch 0's tokens, then branch 1's, ...)."""

    head: Context  # the longest prefix, with its images
    ids: Tensor  # (N,) the row's tokens
    positions: Tensor  # (P, N) rope positions (P = 3 for a VLM, 1 for a text-only policy)
    allowed: Tensor  # (N, N) which keys each query sees
    keep: Tensor  # (K,)
    targets: Tensor  # (K,)


def pack(vlm: VLM, context: Context, branches: Sequence[Branch]) -> Packed:
    """The packed row of ``branches`` after their prefixes of ``context``."""
    import torch

    if not branches:
        raise InvalidInputError("no branches to score")
    for b in branches:
        if not 0 < b.prefix_len <= len(context) or not b.ids:
            raise InvalidInputError(
                f"a branch of {len(b.ids)} tokens after {b.prefix_len} tokens of a {len(context)}-token "
                "context: a branch needs tokens and 0 < prefix length <= the context's length"
            )
    length = max(b.prefix_len for b in branches)
    head = prefix_context(context, length, vlm.image_token_id)
    positions = _positions(vlm, head)  # (P, L)
    ids, pos, keep, start = list(head.token_ids), [positions], [], length
    for b in branches:
        first = int(positions[:, : b.prefix_len].max()) + 1  # text goes on after the prefix's last position
        pos.append((first + torch.arange(len(b.ids))).expand(positions.shape[0], -1))
        keep += [b.prefix_len - 1, *range(start, start + len(b.ids) - 1)]  # token i is predicted one earlier
        ids += b.ids
        start += len(b.ids)
    targets = [t for b in branches for t in b.ids]
    return Packed(
        head,
        torch.tensor(ids),
        torch.cat(pos, dim=1),
        _allowed(length, branches),
        torch.tensor(keep),
        torch.tensor(targets),
    )


def collate_packed(vlm: VLM, rows: Sequence[Packed]) -> tuple[ModelInputs, Tensor]:
    """Model inputs of right-padded packed rows and ``keep`` ``(B, K)`` (short rows repeat their
    last position). A padding query sees only itself, so no softmax row is empty."""
    import torch

    width, k = max(len(r.ids) for r in rows), max(len(r.keep) for r in rows)
    ids = torch.full((len(rows), width), vlm.pad_token_id, dtype=torch.long)  # (B, N)
    allowed = torch.eye(width, dtype=torch.bool).repeat(len(rows), 1, 1)  # (B, N, N)
    positions = torch.zeros(rows[0].positions.shape[0], len(rows), width, dtype=torch.long)  # (P, B, N)
    keep = torch.zeros(len(rows), k, dtype=torch.long)  # (B, K)
    for i, r in enumerate(rows):
        n = len(r.ids)
        ids[i, :n], allowed[i, :n, :n], positions[:, i, :n] = r.ids, r.allowed, r.positions
        keep[i] = torch.cat([r.keep, r.keep[-1:].expand(k - len(r.keep))])
    mask = allowed[:, None]  # (B, 1, N, N)
    if _attention(vlm.model) == "eager":  # eager attention adds the mask to the scores
        mask = torch.zeros(mask.shape).masked_fill(~mask, torch.finfo(torch.float32).min)
    inputs: ModelInputs = {"input_ids": ids, "attention_mask": mask}
    inputs["position_ids"] = positions if vlm.image_token_id >= 0 else positions[0]
    if vlm.image_token_id >= 0:
        inputs["mm_token_type_ids"] = (ids == vlm.image_token_id).long()
    inputs.update(cat_vision([r.head for r in rows]))
    return inputs, keep


def branch_logits(vlm: VLM, rows: Sequence[Packed]) -> list[tuple[Tensor, Tensor]]:
    """``(logits (K, V) float32, targets (K,))`` of each packed row, from one no-grad forward."""
    import torch

    inputs, keep = collate_packed(vlm, rows)
    device = vlm.device
    with torch.no_grad():
        out = vlm.model(
            **{k: v.to(device) for k, v in inputs.items()}, logits_to_keep=keep.to(device), use_cache=False
        )
    logits = out.logits.float()  # (B, K, V)
    return [(logits[i, : len(r.keep)], r.targets.to(device)) for i, r in enumerate(rows)]
