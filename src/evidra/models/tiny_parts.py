"""The parts every tiny offline checkpoint is built from (``tiny``, ``tiny_retrievers``).

A byte-level BPE tokenizer trained here on synthetic text with Qwen2's pre-tokenizer, special
tokens and chat template (``build_tokenizer``); transformers configs of a few hundred thousand
parameters matching its ids (``tiny_config``); the Qwen-VL image processor at a chosen pixel
range (``tiny_image_processor``); and ``own_random_stream``, which seeds the random weights
without touching the caller's generator. Nothing here downloads anything.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Literal

from evidra.core.jsonvalue import JSONObject

if TYPE_CHECKING:
    from transformers import BaseImageProcessor, PreTrainedTokenizerFast

    from evidra.models.hf_types import ModelConfig, Tokenizer

Arch = Literal["qwen2_vl", "qwen2_5_vl", "qwen3_vl"]
ARCHS: tuple[Arch, ...] = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl")

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
# Added but not special in Qwen2.5: they survive skip_special_tokens.
ADDED_TOKENS = ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>")

# Qwen2's pre-tokenizer split pattern (contractions, letters, single digits, punctuation runs).
QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# The Qwen2-VL / Qwen2.5-VL chat template (images as vision_start + image_pad + vision_end).
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}"
    "{% if add_vision_id %}Picture {{ image_count.value }}: {% endif %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}"
    "{% if add_vision_id %}Video {{ video_count.value }}: {% endif %}"
    "<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_WORDS = [
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "is",
    "was",
    "for",
    "on",
    "that",
    "with",
    "as",
    "by",
    "at",
    "from",
    "it",
    "this",
    "which",
    "be",
    "are",
    "an",
    "or",
    "page",
    "image",
    "document",
    "table",
    "chart",
    "figure",
    "answer",
    "question",
    "evidence",
    "think",
    "observe",
    "search",
    "bbox",
    "crop",
    "zoom",
    "box",
    "bounding",
    "image_index",
    "bbox_2d",
    "target",
    "year",
    "population",
    "city",
    "country",
    "revenue",
    "total",
    "percent",
    "value",
    "million",
    "billion",
    "founded",
    "project",
    "company",
    "report",
    "section",
    "title",
    "paragraph",
    "column",
    "row",
    "bar",
    "label",
    "insufficient",
    "relevant",
    "information",
    "no",
    "not",
    "yes",
    "true",
    "false",
    "step",
    "first",
    "second",
    "third",
    "final",
    "result",
]
_TAGS = ("think", "answer", "observe", "evidence", "search", "bbox", "description", "tool", "information")


def _training_corpus(n_lines: int = 3000, seed: int = 0) -> list[str]:
    """Synthetic text covering words, numbers, tags and JSON boxes the paradigms emit."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(3, 12))]
        tag = rng.choice(_TAGS)
        nums = [str(rng.randint(0, 2000)) for _ in range(4)]
        lines.append(f"<{tag}>{' '.join(words).capitalize()}.</{tag}>")
        lines.append(f'{{"bbox_2d": [{", ".join(nums)}], "Image_index": {rng.randint(1, 5)}}}')
        lines.append(f"Bounding Box: ({nums[0]}, {nums[1]}), ({nums[2]}, {nums[3]}) {rng.random():.3f}%")
    return lines


def build_tokenizer(vocab_size: int = 2048, seed: int = 0) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE with Qwen2's pre-tokenizer; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_corpus(seed=seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        padding_side="left",
        chat_template=CHAT_TEMPLATE,
        clean_up_tokenization_spaces=False,
    )
    fast.add_tokens(list(ADDED_TOKENS))
    return fast


def special_token_ids(tokenizer: Tokenizer) -> dict[str, int]:
    """The image / video / vision-span token ids of ``tokenizer``, as a Qwen-VL config names them."""
    get = tokenizer.convert_tokens_to_ids
    return {
        "image_token_id": get("<|image_pad|>"),
        "video_token_id": get("<|video_pad|>"),
        "vision_start_token_id": get("<|vision_start|>"),
        "vision_end_token_id": get("<|vision_end|>"),
    }


def text_config(
    tokenizer: Tokenizer,
    arch: Arch,
    hidden: int,
    rope_theta: float | None = None,
    layers: int = 2,
    heads: int = 4,
) -> JSONObject:
    """The text model's fields of a tiny ``arch`` config (``tiny_config``; the text-only models
    start from them), its vocabulary and special ids those of ``tokenizer``. ``heads`` query
    heads share ``heads // 2`` key-value heads (grouped-query attention, as released)."""
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    half = hidden // heads // 2  # half a head: the rotary pairs, split over time, height, width
    rope: JSONObject = {
        "rope_type": "default",
        "rope_theta": 1e6,
        "mrope_section": [half // 2, half // 4, half // 4],
    }
    cfg: JSONObject = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden,
        "intermediate_size": 2 * hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": max(1, heads // 2),
        "max_position_embeddings": 8192,
        "rope_parameters": rope,
        "bos_token_id": pad,  # Qwen2-VL otherwise defaults to 151643, outside a tiny vocab
        "eos_token_id": eos,
        "pad_token_id": pad,
        "tie_word_embeddings": False,
    }
    if arch == "qwen3_vl":
        cfg["head_dim"] = hidden // heads
        rope.update(rope_theta=5e6, mrope_interleaved=True)
    if rope_theta is not None:
        rope["rope_theta"] = rope_theta
    return cfg


def _vision_config(arch: Arch, hidden: int, heads: int = 4) -> JSONObject:
    if arch == "qwen2_vl":
        return {"depth": 2, "embed_dim": hidden, "hidden_size": hidden, "mlp_ratio": 2, "num_heads": heads}
    common = {"depth": 2, "hidden_size": hidden, "intermediate_size": 2 * hidden, "num_heads": heads}
    if arch == "qwen2_5_vl":
        return {**common, "out_hidden_size": hidden, "window_size": 112, "fullatt_block_indexes": [1]}
    return {
        **common,
        "out_hidden_size": hidden,
        "patch_size": 16,
        "num_position_embeddings": 256,
        "deepstack_visual_indexes": [0],
    }


def tiny_config(
    arch: Arch,
    tokenizer: Tokenizer,
    hidden: int = 64,
    rope_theta: float | None = None,
    layers: int = 2,
    heads: int = 4,
) -> ModelConfig:
    """A transformers config for a tiny model of ``arch`` matching ``tokenizer``'s ids.

    ``rope_theta`` replaces the released base (1e6, Qwen3-VL 5e6): with a head of 16 dimensions
    that base leaves almost every rotary frequency near zero, so a tiny model barely tells
    neighbouring tokens apart; 1e4 learns a fixed output format in about half the steps."""
    import transformers

    cls = {
        "qwen2_vl": transformers.Qwen2VLConfig,
        "qwen2_5_vl": transformers.Qwen2_5_VLConfig,
        "qwen3_vl": transformers.Qwen3VLConfig,
    }[arch]
    return cls(
        text_config=text_config(tokenizer, arch, hidden, rope_theta, layers, heads),
        vision_config=_vision_config(arch, hidden, heads),
        tie_word_embeddings=False,
        **special_token_ids(tokenizer),
    )


def tiny_image_processor(arch: Arch, min_pixels: int, max_pixels: int) -> BaseImageProcessor:
    from transformers import Qwen2VLImageProcessorPil

    kwargs: dict[str, object] = {"min_pixels": min_pixels, "max_pixels": max_pixels}
    if arch == "qwen3_vl":
        kwargs.update(patch_size=16, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return Qwen2VLImageProcessorPil(**kwargs)


@contextmanager
def own_random_stream(seed: int) -> Iterator[None]:
    """Draw from torch's generator seeded with ``seed`` inside, and leave the caller's stream as it
    was: a training run that builds its tiny model draws the same numbers afterwards (its LoRA
    initialisation, its sampling) as a run that finds the model already built."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
