"""The GRPO rows of ``gpu_suite.py``: one real-size step, evidra vs TRL, transformers vs vLLM generation.

``build`` writes a randomly initialised Qwen2.5-VL-3B (the published config, ``grpo_step_gpu.ARCHS``;
initialised on the GPU in bf16) with the project's local tokenizer and processor, once per suite
run; the dry run builds the tiny Qwen2.5-VL instead. Each GRPO row then runs its engine in its
own process (``grpo_common.run_evidra`` / ``run_trl``) at the same settings: 2 prompts x G=4,
128 new tokens (random weights almost never sample end-of-turn, so completions run to the cap;
the tokens actually generated are reported), one random 448x448 page per prompt (256 visual
tokens), bf16 compute with fp32 master weights, the vision tower frozen, gradient checkpointing,
no KL reference (beta 0), token-mean loss, clip 0.2, AdamW; 1 warm-up step, then 2 timed steps.
``*_vllm`` rows generate with a colocated vLLM engine (25% of GPU memory, asleep during the
update) in both engines. ``peak MB`` is the most GPU memory in use during the row (driver view,
so vLLM's own pool counts); ``tok/s`` is generated tokens per second of generation.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from statistics import median

from gpu_suite_common import Ctx, DeviceMemory, Entry, RowOutput, Skip, device_name
from grpo_common import EngineResult, Settings, run_evidra, run_trl, write_images

ARCH = "qwen2.5-vl-3b"
GPU = Settings(
    prompts=2,
    group=4,
    new_tokens=128,
    micro_batch=8,
    beta=0.0,
    lr=1e-6,
    image_size=448,
    dtype="bfloat16",
    gradient_checkpointing=True,
    device="cuda",
)
DRY = replace(GPU, group=2, new_tokens=8, micro_batch=4, image_size=112, device="cpu")
GPU_PIXELS, DRY_PIXELS = 448 * 448, 224 * 224
GPU_STEPS, DRY_STEPS = 2, 1


def settings(ctx: Ctx) -> tuple[Settings, int]:
    return (DRY, DRY_STEPS) if ctx.dry else (GPU, GPU_STEPS)


def build(ctx: Ctx) -> RowOutput:
    """Write the shared checkpoint (random weights) that the model rows load."""
    from grpo_step_gpu import build_checkpoint, count_parameters

    arch = "tiny" if ctx.dry else ARCH
    start = time.perf_counter()
    build_checkpoint(arch, ctx.checkpoint, ctx.device, DRY_PIXELS if ctx.dry else GPU_PIXELS)
    seconds = time.perf_counter() - start
    size = sum(f.stat().st_size for f in ctx.checkpoint.glob("*.safetensors")) / 2**30
    params = "" if ctx.dry else f"{count_parameters(arch) / 1e9:.2f}B params, "
    entry = Entry(
        f"build random {'tiny Qwen2.5-VL' if ctx.dry else 'Qwen2.5-VL-3B'}",
        device_name(ctx.device),
        check="saved",
        note=f"{params}{size:.2f} GiB bf16 safetensors in {seconds:.0f} s",
    )
    return RowOutput([entry])


def _engine_row(ctx: Ctx, engine: str, vllm: bool) -> RowOutput:
    if not (ctx.checkpoint / "config.json").is_file():
        raise Skip("no checkpoint: the build row did not finish")
    s, steps = settings(ctx)
    s = replace(s, vllm=vllm)
    runner = run_evidra if engine == "evidra" else run_trl
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as tmp, DeviceMemory(ctx.device) as memory:
        images = write_images(Path(tmp), s.prompts, s.image_size)
        result: EngineResult = runner(ctx.checkpoint, images, Path(tmp), steps, s)
    step = median(result.times)
    tokens = median(result.tokens) if result.tokens else float("nan")
    gen = median(result.gen_times) if result.gen_times else float("nan")
    name = f"grpo {engine} {'vllm' if vllm else 'hf'}"
    phases = "".join(
        f"; {key.split('/')[1].replace('_peak_gb', '')} peak {gb:.1f} GB" for key, gb in result.phases.items()
    )
    entry = Entry(
        name,
        device_name(ctx.device),
        s_step=step,
        tok_s=tokens / gen,
        peak_mb=memory.peak_mb,
        check=f"{tokens:.0f} tokens/step (cap {s.prompts * s.group * s.new_tokens})",
        note=f"step tok/s {tokens / step:.0f}; torch peak allocated {result.peak_mb:.0f} MB{phases}; "
        f"{s.prompts}x{s.group}, {s.new_tokens} new, {s.image_size}px, {steps} timed steps",
    )
    return RowOutput([entry], {"s_step": round(step, 4), "tok_s": round(tokens / gen, 1)})


def evidra_hf(ctx: Ctx) -> RowOutput:
    return _engine_row(ctx, "evidra", vllm=False)


def evidra_vllm(ctx: Ctx) -> RowOutput:
    return _engine_row(ctx, "evidra", vllm=True)


def trl_hf(ctx: Ctx) -> RowOutput:
    return _engine_row(ctx, "trl", vllm=False)


def trl_vllm(ctx: Ctx) -> RowOutput:
    return _engine_row(ctx, "trl", vllm=True)
