"""Does the trainer score what the rollout sampled? Three checks per episode.

The most reported failure of multimodal RL is "image features and image tokens do not match"
once tools return images into the context; its quieter relatives are a trainer that re-tokenises
text (and scores tokens nobody sampled) and a log-prob gap that biases every importance ratio.
``check_episodes`` runs the trainer's own path (``rl.update.episode_tensors``, then the
micro-batch's log-probs) over rolled-out episodes and reports, per episode:

1. images: the ``<|image_pad|>`` runs of the context, image by image, hold as many tokens as the
   processor's grid of that image gives when it processes the image alone (grid / merge^2), its
   pixel rows are the processor's, each run is framed by ``<|vision_start|>`` / ``<|vision_end|>``;
   and the vision tower, in the trainer's forward, returns as many feature rows as the trainer's
   ids hold image tokens;
2. ids: every policy turn the trainer scores (a run of its loss mask) is exactly a completion the
   sampler returned after exactly the context before it (``rollout.recording``);
3. log-probs: ``max |sampler - trainer|`` over the policy tokens stays within ``tolerance``.

A check that finds a problem says which, in one line; an episode whose images already disagree
is not sent through the trainer's forward (it would raise) and is reported with its image problem.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from evidra.core.errors import EvidraError
from evidra.models.generation import Generation
from evidra.models.loading import VLM
from evidra.models.processors import TextProcessor
from evidra.rl.algo.mismatch import logprob_mismatch
from evidra.rl.update import MicroBatch, episode_tensors
from evidra.rollout import Episode

if TYPE_CHECKING:
    from evidra.models.hf_types import HFModel

CheckKind = Literal["images", "ids", "logprobs"]
KINDS: tuple[CheckKind, ...] = ("images", "ids", "logprobs")


class SamplerRecord(Protocol):
    """What the sampler returned after a context (``rollout.recording.RecordingBackend``)."""

    def after(self, context_ids: Sequence[int]) -> list[Generation]: ...


@dataclass(frozen=True)
class EpisodeCheck:
    """The three checks of one episode; ``problems`` are one line each, empty when all hold."""

    images: int  # images in the episode's context
    image_tokens: int  # <|image_pad|> tokens in it
    policy_tokens: int  # tokens the trainer scored
    max_gap: float  # max |sampler - trainer| log-prob over them (nan: not scored)
    problems: tuple[tuple[CheckKind, str], ...] = ()  # (kind, one line)

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def kinds(self) -> tuple[CheckKind, ...]:
        """The kinds of check that failed, each once, in ``KINDS`` order."""
        failed = {kind for kind, _ in self.problems}
        return tuple(k for k in KINDS if k in failed)


def check_episodes(
    vlm: VLM,
    episodes: Sequence[Episode],
    record: SamplerRecord,
    *,
    tolerance: float = 1e-4,
    temperature: float = 1.0,
    micro_batch_size: int = 8,
) -> list[EpisodeCheck]:
    """Check ``episodes`` (rolled out by the backend ``record`` watched) against the trainer's path.

    The trainer's forwards take the episodes by length, ``micro_batch_size`` at a time: rows of
    like length pad little (the collation and the checks are per row, so the order is free).
    """
    image_problems = [image_problems_of(vlm, ep) for ep in episodes]
    clean = sorted((i for i, p in enumerate(image_problems) if not p), key=lambda i: len(episodes[i].context))
    scored: dict[int, tuple[int, float, list[tuple[CheckKind, str]]]] = {}
    for start in range(0, len(clean), micro_batch_size):
        rows = clean[start : start + micro_batch_size]
        scored.update(_score(vlm, [episodes[i] for i in rows], rows, record, tolerance, temperature))
    out = []
    image_token_id = vlm.image_token_id  # a tokenizer lookup: read once, not per token
    for i, ep in enumerate(episodes):
        tokens, gap, problems = scored.get(i, (0, float("nan"), []))
        out.append(
            EpisodeCheck(
                ep.context.num_images,
                ep.context.token_ids.count(image_token_id),
                tokens,
                gap,
                tuple(("images", p) for p in image_problems[i]) + tuple(problems),
            )
        )
    return out


# 1. images ---------------------------------------------------------------------------------------
def image_runs(ids: Sequence[int], image_token_id: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each maximal run of ``image_token_id`` in ``ids``.

    >>> image_runs([5, 9, 9, 6, 5, 9, 6], 9)
    [(1, 2), (5, 1)]
    """
    runs: list[tuple[int, int]] = []
    for pos, tok in enumerate(ids):
        if tok != image_token_id:
            continue
        if runs and runs[-1][0] + runs[-1][1] == pos:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((pos, 1))
    return runs


def image_problems_of(vlm: VLM, ep: Episode) -> list[str]:
    """Each image's placeholder run and pixels against what the processor makes of that image alone."""
    import torch

    context, tok = ep.context, vlm.tokenizer
    start_id, end_id = (tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>"))
    runs = image_runs(context.token_ids, vlm.image_token_id)
    if len(context.images) != context.num_images:
        return [f"{len(context.images)} images kept but {context.num_images} image grids"]
    if len(runs) != context.num_images:
        return [f"{len(runs)} <|image_pad|> runs for {context.num_images} images"]
    if not runs:
        return []
    # a context with images comes from a vision-language policy
    assert vlm.spec is not None and not isinstance(vlm.processor, TextProcessor)
    assert context.pixel_values is not None and context.image_grid_thw is not None
    merge = vlm.spec.merge_size**2
    problems = []
    patches = 0  # pixel rows of the images before image k
    for k, ((pos, length), image) in enumerate(zip(runs, context.images, strict=True)):
        alone = vlm.processor.image_processor(images=[image], return_tensors="pt")
        grid, kept = alone["image_grid_thw"][0], context.image_grid_thw[k]
        expected = int(grid.prod()) // merge
        rows = context.pixel_values[patches : patches + int(kept.prod())]
        patches += int(kept.prod())
        if not bool((grid == kept).all()):
            problems.append(
                f"image {k}: grid {kept.tolist()} in the context, {grid.tolist()} from the processor"
            )
        elif not torch.allclose(rows, alone["pixel_values"], atol=1e-6):
            problems.append(f"image {k}: its pixel values differ from the processor's")
        if length != expected:
            problems.append(f"image {k}: {length} <|image_pad|> tokens for {expected} features")
        ids = context.token_ids
        if pos == 0 or ids[pos - 1] != start_id or pos + length >= len(ids) or ids[pos + length] != end_id:
            problems.append(f"image {k}: its <|image_pad|> run is not framed by vision start/end tokens")
    return problems


@contextmanager
def _feature_rows(model: HFModel) -> Iterator[list[int]]:
    """Rows of features the vision tower returns during the block, one entry per call."""
    tower = next((m for name, m in model.named_modules() if name.endswith("visual")), None)
    rows: list[int] = []
    if tower is None:
        yield rows
        return

    def hook(_module: object, _args: object, output: Any) -> None:  # output: whatever the tower returns
        pooled = getattr(output, "pooler_output", None)
        rows.append(int((pooled if pooled is not None else output[0]).shape[0]))

    handle = tower.register_forward_hook(hook)
    try:
        yield rows
    finally:
        handle.remove()


# 2. and 3. the trainer's path ------------------------------------------------------------------------
def _score(
    vlm: VLM,
    chunk: Sequence[Episode],
    rows: Sequence[int],
    record: SamplerRecord,
    tolerance: float,
    temperature: float,
) -> dict[int, tuple[int, float, list[tuple[CheckKind, str]]]]:
    """Run one micro-batch of the trainer's path; per episode: scored tokens, max gap, problems."""
    import torch

    features: list[int] = []
    batch_problem: list[tuple[CheckKind, str]] = []
    try:
        (mb,) = episode_tensors(vlm, chunk, len(chunk))  # collation checks placeholders against images
        with torch.no_grad(), _feature_rows(vlm.model) as features:
            trainer = mb.logprobs(vlm.model, temperature).float()  # (b, R)
    except (ValueError, EvidraError) as err:  # transformers: "Image features and image tokens do not match"
        first = str(err).splitlines()[0] if str(err) else type(err).__name__
        return {r: (0, float("nan"), [("images", f"the trainer's path failed: {first}")]) for r in rows}
    tokens = _trainer_image_tokens(mb, vlm.image_token_id)
    if sum(features) != tokens:
        line = f"the vision tower gave {sum(features)} feature rows for the batch's {tokens} image tokens"
        batch_problem.append(("images", line))
    out = {}
    for i, (ep, row) in enumerate(zip(chunk, rows, strict=True)):
        problems = list(batch_problem) + [("ids", p) for p in _id_problems(mb, i, ep, record)]
        gap = logprob_mismatch(mb.sampler_logprobs[i : i + 1], trainer[i : i + 1], mb.loss_mask[i : i + 1])
        if not gap.max_abs <= tolerance:
            problems.append(("logprobs", f"log-prob gap {gap.max_abs:.3g} > tolerance {tolerance:g}"))
        out[row] = (gap.tokens, gap.max_abs, problems)
    return out


def _trainer_image_tokens(mb: MicroBatch, image_token_id: int) -> int:
    inputs = mb.inputs if mb.inputs is not None else mb.prefix.prompt_inputs if mb.prefix else {}
    return int((inputs["input_ids"] == image_token_id).sum())


def trainer_row(mb: MicroBatch, i: int) -> tuple[list[int], list[int], list[int]]:
    """The trainer's row ``i``: prompt ids, response ids and the response's loss mask (unpadded)."""
    if mb.prefix is not None:
        p = int(mb.prefix.prompt_index[i])
        prompt_ids = mb.prefix.prompt_inputs["input_ids"][p]
        prompt = prompt_ids[mb.prefix.prompt_inputs["attention_mask"][p].bool()].tolist()
        length = int(mb.prefix.response_mask[i].sum())
    else:
        assert mb.inputs is not None
        width = mb.response_ids.shape[1]
        attention = mb.inputs["attention_mask"][i].bool()
        prompt = mb.inputs["input_ids"][i, :-width][attention[:-width]].tolist()
        length = int(attention[-width:].sum())
    response = mb.response_ids[i, :length].tolist()
    mask = [int(m) for m in mb.loss_mask[i, :length].tolist()]
    return prompt, response, mask


def _id_problems(mb: MicroBatch, i: int, ep: Episode, record: SamplerRecord) -> list[str]:
    """Each policy turn the trainer scores against the sampler's completions after its context."""
    prompt, response, mask = trainer_row(mb, i)
    turns = _mask_runs(mask)
    problems = []
    if len(turns) != len(ep.trajectory.turns):
        problems.append(
            f"the trainer scores {len(turns)} policy turns, the rollout made {len(ep.trajectory.turns)}"
        )
    for n, (a, b) in enumerate(turns):
        sampled = [g.token_ids for g in record.after(prompt + response[:a])]
        scored = tuple(response[a:b])
        last_cut = n == len(turns) - 1 and ep.trajectory.truncated
        if scored in sampled or (last_cut and any(s[: len(scored)] == scored for s in sampled)):
            continue
        why = "no completion was sampled after its context" if not sampled else "its ids differ"
        problems.append(f"turn {n} ({b - a} tokens at {a}): {why}")
    return problems


def _mask_runs(mask: Sequence[int]) -> list[tuple[int, int]]:
    """``[start, end)`` of each maximal run of 1s."""
    return [(pos, pos + n) for pos, n in image_runs(mask, 1)]
