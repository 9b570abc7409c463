"""Tiny offline late-interaction retrievers (ColQwen2, ColPali) for tests and benchmarks.

Same idea as ``evidra.models.tiny``, from the same parts (``tiny_parts``): a locally trained
tokenizer, a random model of a few hundred thousand parameters built from a config, saved in a
released checkpoint's layout and loaded back through transformers' own ``ColQwen2ForRetrieval`` /
``ColPaliForRetrieval`` classes. ``build_tiny("colqwen2" | "colpali", ...)`` builds them by name.
"""

from __future__ import annotations

from pathlib import Path

from evidra.models.tiny_parts import build_tokenizer, own_random_stream, tiny_config, tiny_image_processor


def build_tiny_colqwen2(
    out_dir: str | Path,
    *,
    seed: int = 0,
    hidden: int = 64,
    embedding_dim: int = 32,
    max_pixels: int = 224 * 224,
) -> Path:
    """A tiny ColQwen2 retriever (Qwen2-VL backbone) saved as a checkpoint directory."""
    from transformers import ColQwen2Config, ColQwen2ForRetrieval, ColQwen2Processor

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(seed=seed)
    vlm_config = tiny_config("qwen2_vl", tokenizer, hidden)
    config = ColQwen2Config(vlm_config=vlm_config.to_dict(), embedding_dim=embedding_dim)
    with own_random_stream(seed):
        ColQwen2ForRetrieval(config).save_pretrained(out)
    processor = ColQwen2Processor(
        image_processor=tiny_image_processor("qwen2_vl", 56 * 56, max_pixels), tokenizer=tokenizer
    )
    processor.save_pretrained(out)
    return out


def build_tiny_colpali(
    out_dir: str | Path, *, seed: int = 0, hidden: int = 64, embedding_dim: int = 32, image_size: int = 28
) -> Path:
    """A tiny ColPali retriever (PaliGemma: SigLIP vision tower + Gemma text) as a checkpoint directory.

    Pages are resized to ``image_size`` squared (ColPali's fixed 448 in the release) and give
    ``(image_size / 14)^2`` image tokens. The processor adds PaliGemma's ``<image>``, location and
    segmentation tokens to the tokenizer, so the text vocabulary is sized after it.
    """
    from transformers import (
        ColPaliConfig,
        ColPaliForRetrieval,
        ColPaliProcessor,
        GemmaConfig,
        PaliGemmaConfig,
        SiglipImageProcessorPil,
        SiglipVisionConfig,
    )

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    images = SiglipImageProcessorPil(size={"height": image_size, "width": image_size})
    images.image_seq_length = (image_size // 14) ** 2  # read by the processor: <image> tokens per page
    tokenizer = build_tokenizer(seed=seed)
    tokenizer.add_special_tokens({"bos_token": "<bos>"})  # PaliGemma prompts start with it
    processor = ColPaliProcessor(image_processor=images, tokenizer=tokenizer)
    tokenizer = processor.tokenizer
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        image_size=image_size,
        patch_size=14,
    )
    text = GemmaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=hidden // 2,
        pad_token_id=tokenizer.pad_token_id,
    )
    vlm = PaliGemmaConfig(
        vision_config=vision.to_dict(),
        text_config=text.to_dict(),
        image_token_index=tokenizer.convert_tokens_to_ids("<image>"),
        projection_dim=hidden,
        hidden_size=hidden,
    )
    with own_random_stream(seed):
        retriever = ColPaliForRetrieval(ColPaliConfig(vlm_config=vlm.to_dict(), embedding_dim=embedding_dim))
    retriever.save_pretrained(out)
    processor.save_pretrained(out)
    return out
