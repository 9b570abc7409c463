"""The vLLM prompt of a ``Context``: token ids, the page images, and the processor's pixel limits.

A ``Context``'s ids hold each image as a run of ``<|image_pad|>`` tokens already expanded to
the image's size (grid t*h*w / merge^2 after ``smart_resize``). vLLM 0.32's Qwen2-VL / Qwen2.5-VL
processor (``_get_prompt_updates`` in ``vllm/model_executor/models/qwen2_vl.py`` and
``qwen2_5_vl.py``) replaces *every* single ``<|image_pad|>`` of a token prompt by that many
copies, and ``_apply_prompt_updates`` in ``vllm/multimodal/processing/processor.py`` matches that
one-token target item by item without checking whether a run is already expanded: an expanded
run would be expanded again, its second token taken for the next image. So each run is collapsed
to one placeholder here, and vLLM, given the same images with the same ``min_pixels`` /
``max_pixels``, expands it back to the same count. The backend checks the prompt ids vLLM
reports against the ``Context``'s before it accepts a completion.

Pure: builds the request, imports nothing from vLLM, so it is tested without it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.models.context import Context

if TYPE_CHECKING:
    from PIL.Image import Image


@dataclass(frozen=True)
class VLLMPrompt:
    """What ``vllm.LLM.generate`` takes for one row (as a ``TokensPrompt`` dict)."""

    prompt_token_ids: tuple[int, ...]  # each image's placeholder run collapsed to one token
    images: tuple[Image, ...] = ()  # in the order of their placeholders
    min_pixels: int | None = None
    max_pixels: int | None = None

    def as_tokens_prompt(self) -> dict[str, object]:
        prompt: dict[str, object] = {"prompt_token_ids": list(self.prompt_token_ids)}
        if self.images:
            prompt["multi_modal_data"] = {"image": list(self.images)}
            prompt["mm_processor_kwargs"] = {"min_pixels": self.min_pixels, "max_pixels": self.max_pixels}
        return prompt


def placeholder_runs(token_ids: tuple[int, ...], image_token_id: int) -> list[tuple[int, int]]:
    """``(start, length)`` of each maximal run of ``image_token_id``, in order.

    >>> placeholder_runs((1, 9, 9, 9, 2, 3, 9, 9, 4), 9)
    [(1, 3), (6, 2)]
    """
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(token_ids):
        if t != image_token_id:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def collapse_placeholders(context: Context, image_token_id: int, merge_size: int = 2) -> tuple[int, ...]:
    """The context's ids with each image's placeholder run cut to one token.

    Each run must have the length its image's grid gives (t*h*w / merge^2), in order: a run that
    does not belong to exactly one image means the ids and the images disagree.
    """
    runs = placeholder_runs(context.token_ids, image_token_id)
    grids = [] if context.image_grid_thw is None else [int(g.prod()) for g in context.image_grid_thw]
    want = [g // merge_size**2 for g in grids]
    if [n for _, n in runs] != want:
        raise InvalidInputError(
            f"the context's image placeholder runs have lengths {[n for _, n in runs]} but its "
            f"{len(want)} images need {want}; ids and images were built apart"
        )
    ids = list(context.token_ids)
    for start, n in reversed(runs):
        del ids[start + 1 : start + n]
    return tuple(ids)


def vllm_prompt(
    context: Context, image_token_id: int, *, min_pixels: int, max_pixels: int, merge_size: int = 2
) -> VLLMPrompt:
    """The vLLM request for ``context``; a text-only context passes its ids unchanged."""
    if not context.num_images:
        return VLLMPrompt(context.token_ids)
    if len(context.images) != context.num_images:
        raise InvalidInputError(
            f"the context has {context.num_images} images' pixel values but keeps {len(context.images)} "
            "images; build it with encode_text / encode_messages / encode_turn, which keep them"
        )
    ids = collapse_placeholders(context, image_token_id, merge_size)
    return VLLMPrompt(ids, context.images, min_pixels, max_pixels)
