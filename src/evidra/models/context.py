"""Token-level conversation contexts and their batching.

A ``Context`` is a tokenized conversation prefix (image placeholders already expanded) plus
the vision inputs of its images in order, and the images themselves (for an engine that
processes them again, such as vLLM; the trainer computes from the pixel values only).
Multi-turn rollouts grow a context by appending the exact sampled ids of each policy turn and
the tokenized observation turns (text and images), so nothing is ever re-tokenised from text.

Qwen-VL computes its 3D (mrope) positions only when ``mm_token_type_ids`` is passed, so every
batch built here carries it (1 on image tokens, 0 elsewhere), except for a text-only policy
(``image_token_id`` -1), whose forward does not take it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from evidra.core.errors import InvalidInputError
from evidra.core.types import Message
from evidra.models.chat import ChatMessage, to_chat_dicts

if TYPE_CHECKING:
    from PIL.Image import Image
    from torch import Tensor

    from evidra.models.hf_types import ModelInputs, Processor


@dataclass(frozen=True, eq=False)
class Context:
    """Token ids of a conversation prefix and the vision inputs of its images, in order."""

    token_ids: tuple[int, ...]
    pixel_values: Tensor | None = None  # (patches, D) float tensor, or None without images
    image_grid_thw: Tensor | None = None  # (images, 3) long tensor, or None
    images: tuple[Image, ...] = ()  # the images (PIL) the pixel values came from, in the same order

    @property
    def num_images(self) -> int:
        return 0 if self.image_grid_thw is None else int(self.image_grid_thw.shape[0])

    def __len__(self) -> int:
        return len(self.token_ids)

    def extend(self, other: Context) -> Context:
        """This context followed by ``other`` (ids and images concatenated in order)."""
        import torch

        def cat(a: Tensor | None, b: Tensor | None) -> Tensor | None:
            if a is None:
                return b
            return a if b is None else torch.cat([a, b], dim=0)

        return Context(
            self.token_ids + other.token_ids,
            cat(self.pixel_values, other.pixel_values),
            cat(self.image_grid_thw, other.image_grid_thw),
            self.images + other.images,
        )

    def append_ids(self, ids: Sequence[int]) -> Context:
        return Context(self.token_ids + tuple(ids), self.pixel_values, self.image_grid_thw, self.images)


def encode_text(processor: Processor, text: str, images: Sequence[Image] = ()) -> Context:
    """Tokenize already-templated ``text``; each image placeholder is expanded by the processor."""
    enc = processor(text=[text], images=list(images) or None, return_tensors="pt")
    return Context(
        tuple(enc["input_ids"][0].tolist()),
        enc.get("pixel_values") if images else None,
        enc.get("image_grid_thw") if images else None,
        tuple(images),
    )


def encode_messages(
    processor: Processor, messages: Sequence[Message], *, add_generation_prompt: bool = True
) -> Context:
    """A conversation rendered with the chat template and tokenized with its images."""
    chat, images = to_chat_dicts(messages)
    text = processor.apply_chat_template(chat, tokenize=False, add_generation_prompt=add_generation_prompt)
    return encode_text(processor, str(text), images)


_SENTINEL = "\u2063evidra-observation-boundary\u2063"
_END_OF_TURN = "<|im_end|>"


def encode_turn(processor: Processor, messages: Sequence[Message], *, close_previous: bool) -> Context:
    """Tokens inserted after a policy turn: the observation turn(s), then the next assistant header.

    The messages are rendered with the checkpoint's own chat template behind a sentinel system
    turn, which is then cut off, so the template decides the markup. The policy turn ends with
    ``<|im_end|>`` when it stopped at end-of-turn; when it stopped at a stop string
    (``</search>``), ``close_previous`` keeps the ``<|im_end|>`` that closes it.
    """
    chat, images = to_chat_dicts(messages)
    sentinel: ChatMessage = {"role": "system", "content": [{"type": "text", "text": _SENTINEL}]}
    rendered = str(
        processor.apply_chat_template([sentinel, *chat], tokenize=False, add_generation_prompt=True)
    )
    tail = rendered[rendered.index(_SENTINEL) + len(_SENTINEL) :]
    if not tail.startswith(_END_OF_TURN):
        raise InvalidInputError(
            "the chat template does not close a turn with <|im_end|>; not a Qwen template"
        )
    text = tail if close_previous else tail[len(_END_OF_TURN) :]
    return encode_text(processor, text, images)


def _image_tokens(context: Context) -> int:
    """How many placeholder tokens the context's images expand to (grid / merge^2, merge 2)."""
    if context.image_grid_thw is None:
        return 0
    return int(context.image_grid_thw.prod(dim=1).sum()) // 4


def cat_vision(contexts: Sequence[Context]) -> ModelInputs:
    """``pixel_values`` and ``image_grid_thw`` of the contexts' images, in order; {} without images."""
    import torch

    pixels = [c.pixel_values for c in contexts if c.pixel_values is not None]
    grids = [c.image_grid_thw for c in contexts if c.image_grid_thw is not None]
    if not pixels:
        return {}
    return {"pixel_values": torch.cat(pixels, dim=0), "image_grid_thw": torch.cat(grids, dim=0)}


def collate_left(contexts: Sequence[Context], pad_id: int, image_token_id: int) -> ModelInputs:
    """Left-padded model inputs for a batch of contexts (what generation needs)."""
    import torch

    if not contexts:
        raise InvalidInputError("cannot collate an empty batch of contexts")
    width = max(len(c) for c in contexts)
    ids = torch.full((len(contexts), width), pad_id, dtype=torch.long)  # (B, P)
    mask = torch.zeros_like(ids)
    for i, c in enumerate(contexts):
        if len(c):
            ids[i, width - len(c) :] = torch.tensor(c.token_ids, dtype=torch.long)
            mask[i, width - len(c) :] = 1
    return {
        "input_ids": ids,
        "attention_mask": mask,
        **_types(ids, mask, image_token_id),
        **cat_vision(contexts),
    }


def _types(ids: Tensor, mask: Tensor, image_token_id: int) -> ModelInputs:
    """``mm_token_type_ids`` (1 on image tokens) for a VLM; nothing for a text-only model (id -1)."""
    if image_token_id < 0:
        return {}
    return {"mm_token_type_ids": (ids == image_token_id).long() * mask}


def collate_split(
    contexts: Sequence[Context], prompt_lens: Sequence[int], pad_id: int, image_token_id: int
) -> tuple[ModelInputs, Tensor, Tensor]:
    """Inputs for teacher forcing: prompts left-padded, responses right-padded.

    ``contexts[i]`` is prompt + response with all images; its first ``prompt_lens[i]`` tokens
    are the prompt. Every response then starts at the same column, so the response log-probs
    are the last R columns. Returns ``(inputs, response_ids (B, R), response_mask (B, R))``.
    """
    import torch

    if len(contexts) != len(prompt_lens):
        raise InvalidInputError(f"{len(contexts)} contexts but {len(prompt_lens)} prompt lengths")
    p_width = max(prompt_lens)
    r_width = max(1, max(len(c) - p for c, p in zip(contexts, prompt_lens, strict=True)))
    ids = torch.full((len(contexts), p_width + r_width), pad_id, dtype=torch.long)  # (B, P + R)
    mask = torch.zeros_like(ids)
    for i, (c, p) in enumerate(zip(contexts, prompt_lens, strict=True)):
        if not 0 < p <= len(c):
            raise InvalidInputError(f"prompt length {p} outside context of {len(c)} tokens")
        tokens = torch.tensor(c.token_ids, dtype=torch.long)
        images_in_response = int((tokens[p:] == image_token_id).sum())
        if images_in_response != _image_tokens(c) - int((tokens[:p] == image_token_id).sum()):
            raise InvalidInputError(
                f"context {i} has image placeholder tokens that belong to no image in its response; "
                "completions must not contain <|image_pad|> (generation suppresses it)"
            )
        ids[i, p_width - p : p_width] = tokens[:p]
        ids[i, p_width : p_width + len(c) - p] = tokens[p:]
        mask[i, p_width - p : p_width + len(c) - p] = 1
    inputs = {
        "input_ids": ids,
        "attention_mask": mask,
        **_types(ids, mask, image_token_id),
        **cat_vision(contexts),
    }
    return inputs, ids[:, p_width:], mask[:, p_width:]
