"""A tiny random LLaVA that ``transformers serve`` runs on a CPU: a real OpenAI-compatible server
process over a model built here, offline, for tests and benchmarks of evidra's endpoint path.

A 2-layer CLIP vision tower on 56-pixel images and a 2-layer Qwen2 text model, with evidra's tiny
tokenizer (``evidra.models.tiny``) plus an ``<image>`` token and a chat template. evidra itself
does not load LLaVA in-process (``load_vlm`` takes Qwen-VL families); a server does.
"""

from __future__ import annotations

from pathlib import Path


def tiny_llava(tokenizer_dir: Path, out: Path) -> Path:
    """A LLaVA of random weights (2-layer CLIP tower on 56-pixel images, 2-layer Qwen2 text model)."""
    from transformers import (
        AutoTokenizer,
        CLIPImageProcessor,
        CLIPVisionConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        LlavaProcessor,
        Qwen2Config,
    )

    tok = AutoTokenizer.from_pretrained(tokenizer_dir)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    vision = CLIPVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=56,
        patch_size=14,
    )
    text = Qwen2Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        eos_token_id=tok.convert_tokens_to_ids("<|im_end|>"),
    )
    image_id = tok.convert_tokens_to_ids("<image>")
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_id=image_id, image_seq_length=16)
    LlavaForConditionalGeneration(config).save_pretrained(out)
    template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
        "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
        "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    images = CLIPImageProcessor(size={"shortest_edge": 56}, crop_size={"height": 56, "width": 56})
    LlavaProcessor(
        image_processor=images,
        tokenizer=tok,
        patch_size=14,
        vision_feature_select_strategy="default",
        chat_template=template,
        num_additional_image_tokens=1,
    ).save_pretrained(out)
    return out
