"""Tiny offline Qwen-VL, ColQwen2 and ColPali checkpoints for tests and the demo.

Nothing here downloads anything. ``build_tiny(arch, out_dir)`` trains a small byte-level BPE
tokenizer with the Qwen special tokens and chat template, builds a random model of a few
hundred thousand parameters from a config, and saves everything in the layout of a real
checkpoint directory, so it is loaded back through the same ``load_vlm`` path a real
Qwen2-VL / Qwen2.5-VL / Qwen3-VL checkpoint uses (the retrievers: ``tiny_retrievers``; the
tokenizer, configs and image processor they share: ``tiny_parts``).

    python -c "from evidra.models.tiny import build_tiny; print(build_tiny('qwen2_5_vl', '/tmp/tiny'))"
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import InvalidInputError
from evidra.models.tiny_parts import (
    ARCHS,
    CHAT_TEMPLATE,
    Arch,
    build_tokenizer,
    own_random_stream,
    special_token_ids,
    text_config,
    tiny_config,
    tiny_image_processor,
)
from evidra.models.tiny_retrievers import build_tiny_colpali, build_tiny_colqwen2

if TYPE_CHECKING:
    from evidra.models.hf_types import Tokenizer

__all__ = [
    "ARCHS",
    "RETRIEVER_ARCHS",
    "TEXT_ARCHS",
    "TINY_KINDS",
    "build_tiny",
    "build_tiny_text",
    "build_tokenizer",
    "save_processor",
    "special_token_ids",
    "tiny_config",
]

TextArch = Literal["qwen2", "qwen3"]
TEXT_ARCHS: tuple[TextArch, ...] = ("qwen2", "qwen3")  # text-only causal LMs (Qwen2/2.5, Qwen3)
RETRIEVER_ARCHS = ("colqwen2", "colpali")
TINY_KINDS = (*ARCHS, *TEXT_ARCHS, *RETRIEVER_ARCHS)  # what ``build_tiny`` and ``tiny:ARCH`` accept


def _write_release_layout(out: Path, stock_processor: str) -> None:
    """Rewrite the saved processor files in the layout of the released Qwen-VL checkpoints.

    transformers 5 saves one ``processor_config.json``; released checkpoints instead ship a
    ``preprocessor_config.json`` with top-level ``min_pixels`` / ``max_pixels`` and name the
    stock processor class. Loading the tiny model from this layout exercises the same path.
    """
    combined = out / "processor_config.json"
    data = json.loads(combined.read_text())
    image = dict(data.pop("image_processor"))
    size = image.pop("size")
    image.update(min_pixels=size["shortest_edge"], max_pixels=size["longest_edge"])
    image["processor_class"] = stock_processor
    (out / "preprocessor_config.json").write_text(json.dumps(image, indent=2))
    combined.unlink()
    tok_cfg = out / "tokenizer_config.json"
    tok = json.loads(tok_cfg.read_text())
    tok["processor_class"] = stock_processor
    tok_cfg.write_text(json.dumps(tok, indent=2))


def build_tiny(
    arch: str,
    out_dir: str | Path,
    *,
    seed: int = 0,
    hidden: int = 64,
    min_pixels: int = 56 * 56,
    max_pixels: int = 224 * 224,
    rope_theta: float | None = None,
    layers: int = 2,
    heads: int = 4,
) -> Path:
    """Build, save and return the directory of a tiny random ``arch`` checkpoint.

    ``arch`` is one of ``qwen2_vl``, ``qwen2_5_vl``, ``qwen3_vl``, the text-only ``qwen2`` and
    ``qwen3``, ``colqwen2`` or ``colpali``. ``hidden`` and ``layers`` size a vision-language
    model's language model (its vision tower has ``hidden`` channels and two blocks); ``heads``
    its attention heads (the language model's share ``heads // 2`` key-value heads).
    """
    import transformers
    from transformers import GenerationConfig

    if arch == "colqwen2":
        return build_tiny_colqwen2(out_dir, seed=seed, hidden=hidden, max_pixels=max_pixels)
    if arch == "colpali":
        return build_tiny_colpali(out_dir, seed=seed, hidden=hidden)
    if arch in TEXT_ARCHS:
        return build_tiny_text(arch, out_dir, seed=seed)
    if arch not in ARCHS:
        raise InvalidInputError(f"unknown tiny architecture {arch!r}; choose one of {', '.join(TINY_KINDS)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed=seed)
    config = tiny_config(arch, tokenizer, hidden, rope_theta, layers, heads)
    with own_random_stream(seed):
        model = transformers.AutoModelForImageTextToText.from_config(config)
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos[1], bos_token_id=eos[1])
    model.save_pretrained(out)
    save_processor(arch, out, tokenizer, min_pixels=min_pixels, max_pixels=max_pixels)
    return out


def save_processor(arch: Arch, out: Path, tokenizer: Tokenizer, *, min_pixels: int, max_pixels: int) -> None:
    """Save the processor of ``tokenizer`` into checkpoint directory ``out``, in the released layout.

    Used for the tiny models and for random full-size ones (``benchmarks/grpo_step_gpu.py``).
    """
    from evidra.models.processors import image_only_processor_class

    processor_cls = image_only_processor_class(arch)
    processor = processor_cls(
        image_processor=tiny_image_processor(arch, min_pixels, max_pixels),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(out)
    _write_release_layout(out, processor_cls.__mro__[1].__name__)


def build_tiny_text(arch: str, out_dir: str | Path, *, seed: int = 0, hidden: int = 128) -> Path:
    """A tiny random text-only Qwen2 / Qwen3 causal LM with the kit's tokenizer and chat template.

    Two heads of 64 dimensions: vLLM's CPU attention backend refuses head sizes below 32, so the
    same checkpoint serves the transformers and the vLLM rollout backends.
    """
    import transformers
    from transformers import GenerationConfig

    if arch not in TEXT_ARCHS:
        raise InvalidInputError(
            f"unknown tiny text architecture {arch!r}; choose one of {', '.join(TEXT_ARCHS)}"
        )
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed=seed)
    text = text_config(tokenizer, "qwen2_vl", hidden)
    text.update(
        num_attention_heads=2, num_key_value_heads=1, head_dim=hidden // 2, max_position_embeddings=4096
    )
    text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6}
    cls = transformers.Qwen2Config if arch == "qwen2" else transformers.Qwen3Config
    with own_random_stream(seed):
        model = transformers.AutoModelForCausalLM.from_config(cls(**text))
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos[1], bos_token_id=eos[1])
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
