"""The FSDP2 row of ``gpu_suite.py``: one bf16 training step of a sharded Qwen2.5-VL on one device.

A world of one process (``torch.distributed`` on NCCL; gloo in the dry run, from the
``MASTER_ADDR`` / ``MASTER_PORT`` / ``RANK`` / ``WORLD_SIZE`` the suite sets), a Qwen2.5-VL
with the 3B model's widths but 4 decoder layers and 4 vision blocks (the tiny model in the dry
run), fp32 master weights with the vision tower frozen, sharded by evidra's own
``rl.engine.shard_model`` (``fully_shard`` per block, then the root, with the ``MixedPrecisionPolicy``
of bf16 compute and fp32 gradient reduction), AdamW. One step on one image + question + answer:
the loss must be finite, the gradient norm finite and every trainable parameter shard must move.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from gpu_suite_common import Ctx, Entry, RowOutput, device_name


def _model_and_processor(ctx: Ctx) -> tuple[Any, Any]:
    """A Qwen2.5-VL built in fp32 on the row's device and its (local) processor."""
    import torch
    from transformers import AutoModelForImageTextToText

    from evidra.models.loading import load_processor
    from evidra.models.tiny import build_tokenizer, save_processor, tiny_config

    tokenizer = build_tokenizer()
    out = Path(ctx.workdir) / "fsdp2_processor"
    save_processor("qwen2_5_vl", out, tokenizer, min_pixels=56 * 56, max_pixels=224 * 224)
    if ctx.dry:
        config = tiny_config("qwen2_5_vl", tokenizer)
    else:
        from grpo_step_gpu import real_config

        config = real_config(
            "qwen2.5-vl-3b",
            tokenizer,
            text_over={"num_hidden_layers": 4},
            vision_over={"depth": 4, "fullatt_block_indexes": [3]},
        )
    torch.manual_seed(0)
    with torch.device(ctx.device):
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
    return model, load_processor(out, "qwen2_5_vl")


def _batch(processor: Any, device: str) -> dict[str, Any]:
    """One image + question + answer, tokenised by evidra; labels are the input ids."""
    import numpy as np
    from PIL import Image

    from evidra.core.types import ImagePart, Message, TextPart
    from evidra.models.context import collate_left, encode_messages

    page = Image.fromarray(np.random.default_rng(0).integers(0, 255, (224, 224, 3), dtype=np.uint8))
    messages = [
        Message("user", (ImagePart(page), TextPart("What is the total on this page?"))),
        Message.text("assistant", "The total is 1987."),
    ]
    ctx = encode_messages(processor, messages, add_generation_prompt=False)
    image_id = processor.tokenizer.convert_tokens_to_ids("<|image_pad|>")
    inputs = collate_left([ctx], processor.tokenizer.pad_token_id, image_id)
    inputs["labels"] = inputs["input_ids"].clone()
    return {k: v.to(device) for k, v in inputs.items()}


def run(ctx: Ctx) -> RowOutput:
    import torch
    import torch.distributed as dist

    from evidra.models.adapters import freeze
    from evidra.rl.parallel.precision import Precision
    from evidra.rl.parallel.processes import fsdp_modules, shard_model

    backend = "gloo" if ctx.dry else "nccl"
    if not ctx.dry:
        torch.cuda.set_device(0)
    dist.init_process_group(backend)
    try:
        model, processor = _model_and_processor(ctx)
        freeze(model, ("model.visual.", "visual."))  # as training does by default
        shard_model(model, Precision(load="float32", compute="bfloat16"))
        trainable = [p for p in model.parameters() if p.requires_grad]
        before = [p.to_local().detach().clone() for p in trainable]
        optimizer = torch.optim.AdamW(trainable, lr=1e-4)
        batch = _batch(processor, ctx.device)
        start = time.perf_counter()
        loss = model(**batch).loss
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        norm = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
        optimizer.step()
        if not ctx.dry:
            torch.cuda.synchronize()
        seconds = time.perf_counter() - start
        moved = sum(int(not torch.equal(b, p.to_local())) for b, p in zip(before, trainable, strict=True))
        value, grad = float(loss), float(norm)
        ok = math.isfinite(value) and math.isfinite(grad) and moved == len(trainable)
        sharded = sum(hasattr(p, "to_local") for p in model.parameters())
        peak = torch.cuda.max_memory_allocated() / 2**20 if not ctx.dry else float("nan")
        params = sum(p.numel() for p in model.parameters()) / 1e6
        entry = Entry(
            "fsdp2 one bf16 step",
            device_name(ctx.device),
            s_step=seconds,
            peak_mb=peak,
            check=f"loss {value:.3f} finite={math.isfinite(value)}; moved {moved}/{len(trainable)}",
            note=f"{backend}, world 1, {len(fsdp_modules(model))} FSDP modules, {sharded} DTensor "
            f"params, {params:.1f}M params, grad norm {grad:.3g}",
        )
        return RowOutput([entry], {"fsdp2_ok": int(ok)}, ok)
    finally:
        dist.destroy_process_group()
