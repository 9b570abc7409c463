"""GRPO step at real size: evidra vs TRL's GRPOTrainer on a random Qwen2.5-VL-3B / 7B, on one GPU.

Why random weights: the cost of a GRPO step depends on the architecture, the sequence lengths and
the batch, not on what the weights say, so no checkpoint has to be downloaded. The model is built
from the published ``config.json`` values of Qwen/Qwen2.5-VL-3B-Instruct and -7B-Instruct
(``ARCHS`` below), randomly initialised, saved in bf16 with the project's locally trained
tokenizer and processor (``evidra.models.tiny``). The tokenizer knows fewer tokens than the real
one, but the embedding matrix and LM head keep the real vocabulary size, so memory and compute
are real; random weights rarely sample end-of-sequence, so every completion runs to
``--new-tokens`` in both engines.

Setting (both engines, each in its own process): P prompts x G completions, one random page image
per prompt (1024x1024, capped by the processor's ``max_pixels``: 1024 visual tokens by default),
bf16 compute with fp32 master weights (full fine-tuning; the frozen vision tower and the KL
reference stored in bf16) or ``--lora`` (bf16 base, fp32 adapter, the adapter-disabled model as the
reference), gradient checkpointing, KL in the loss (k3, ``--beta``; 0 drops the reference),
token-mean loss, clip 0.2, AdamW, the same sampling temperature, plain ``transformers`` generation
(no vLLM in either). One warm-up step, then ``--steps`` timed steps. Printed: median step time,
completion tokens per second of generation (rollout tok/s) and of the whole step, peak GPU memory
(``torch.cuda.max_memory_allocated``) and TRL / evidra ratios, with the device and versions.

    python benchmarks/grpo_step_gpu.py --arch qwen2.5-vl-3b            # on an 80 GB GPU
    python benchmarks/grpo_step_gpu.py --arch qwen2.5-vl-7b --lora     # full 7B FT needs > 80 GB
    OMP_NUM_THREADS=1 python benchmarks/grpo_step_gpu.py --arch tiny --device cpu   # smoke test
    python benchmarks/grpo_step_gpu.py --arch qwen2.5-vl-7b --count-params          # meta device

Without ``--arch`` it runs Qwen2.5-VL-3B on a GPU and the tiny model on a CPU (the real sizes are
opt-in there). The last line is ``RESULT trl_vs_evidra_step=<x> trl_vs_evidra_rollout_tok_s=<y>``
(``na`` without TRL).

TRL is the peer (``pip install 'evidra[bench]'``); without it only evidra's row is printed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from statistics import median
from typing import Any

from grpo_common import (
    EngineResult,
    Settings,
    print_result,
    run_evidra,
    run_trl,
    run_worker,
    settings_from_json,
    settings_to_json,
    write_images,
)

# Published config.json values (text model, then vision tower) of Qwen/Qwen2.5-VL-{3B,7B}-Instruct.
_VISION = {
    "depth": 32,
    "hidden_size": 1280,
    "intermediate_size": 3420,
    "num_heads": 16,
    "in_channels": 3,
    "patch_size": 14,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "window_size": 112,
    "fullatt_block_indexes": [7, 15, 23, 31],
    "tokens_per_second": 2,
    "hidden_act": "silu",
}
ARCHS: dict[str, dict[str, Any]] = {
    "qwen2.5-vl-3b": {
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
        "max_window_layers": 70,
    },
    "qwen2.5-vl-7b": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "vocab_size": 152064,
        "tie_word_embeddings": False,
        "max_window_layers": 28,
    },
}
_TEXT_COMMON = {
    "max_position_embeddings": 128000,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "use_sliding_window": False,
    "sliding_window": 32768,
    "attention_dropout": 0.0,
}
_ROPE = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]}


@dataclass(frozen=True)
class Preset:
    """Defaults of one ``--arch``: the real sizes on a GPU, a seconds-long smoke run for ``tiny``."""

    settings: Settings
    steps: int


_GPU = Settings(
    prompts=4,
    group=4,
    new_tokens=256,
    micro_batch=4,
    image_size=1024,
    dtype="bfloat16",
    gradient_checkpointing=True,
    device="cuda",
)
PRESETS = {
    "qwen2.5-vl-3b": Preset(_GPU, steps=3),
    "qwen2.5-vl-7b": Preset(_GPU, steps=3),
    "tiny": Preset(
        Settings(
            prompts=2,
            group=2,
            new_tokens=8,
            micro_batch=4,
            image_size=224,
            dtype="bfloat16",
            gradient_checkpointing=True,
        ),
        steps=1,
    ),
}
MAX_PIXELS = {"tiny": 224 * 224}  # else 1024 visual tokens (1024 x 28 x 28), a common RL setting
MIN_PIXELS = 56 * 56


def real_config(
    arch: str,
    tokenizer: Any,
    *,
    text_over: dict[str, Any] | None = None,
    vision_over: dict[str, Any] | None = None,
) -> Any:
    """The transformers config of ``arch`` with ``tokenizer``'s special-token ids (real vocab size);
    ``text_over`` / ``vision_over`` replace entries (fewer layers, say)."""
    from transformers import Qwen2_5_VLConfig

    from evidra.models.tiny import special_token_ids

    text = {**ARCHS[arch], **_TEXT_COMMON, "rope_parameters": dict(_ROPE), **(text_over or {})}
    text.pop("tie_word_embeddings")  # a field of the outer config, not of the text config
    pad, eos = tokenizer.convert_tokens_to_ids("<|endoftext|>"), tokenizer.convert_tokens_to_ids("<|im_end|>")
    text.update(bos_token_id=pad, eos_token_id=eos, pad_token_id=pad)
    vision = {**_VISION, "out_hidden_size": ARCHS[arch]["hidden_size"], **(vision_over or {})}
    return Qwen2_5_VLConfig(
        text_config=text,
        vision_config=vision,
        tie_word_embeddings=ARCHS[arch]["tie_word_embeddings"],
        **special_token_ids(tokenizer),
    )


def build_checkpoint(arch: str, out: Path, device: str, max_pixels: int) -> Path:
    """Save a random bf16 ``arch`` checkpoint with the local tokenizer and processor into ``out``."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from evidra.models.tiny import build_tiny, build_tokenizer, save_processor

    if arch == "tiny":
        return build_tiny("qwen2_5_vl", out, max_pixels=max_pixels)
    tokenizer = build_tokenizer()
    torch.manual_seed(0)
    with torch.device(device):  # initialise on the GPU: seconds instead of minutes on CPU
        model = AutoModelForImageTextToText.from_config(real_config(arch, tokenizer), dtype=torch.bfloat16)
    eos = [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]
    model.generation_config = GenerationConfig(eos_token_id=eos, pad_token_id=eos[1], bos_token_id=eos[1])
    model.save_pretrained(out)
    save_processor("qwen2_5_vl", out, tokenizer, min_pixels=MIN_PIXELS, max_pixels=max_pixels)
    return out


def count_parameters(arch: str) -> int:
    """Parameters of ``arch`` built on the meta device (no memory, no weights)."""
    import torch
    from transformers import AutoModelForImageTextToText

    from evidra.models.tiny import build_tokenizer

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(real_config(arch, build_tokenizer()))
    return sum(p.numel() for p in model.parameters())


def worker(role: str, arch: str, model: Path, steps: int, s: Settings, max_pixels: int) -> None:
    import torch

    if s.device == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if role == "build":
        build_checkpoint(arch, model, s.device, max_pixels)
        print("RESULT {}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        images = write_images(Path(tmp), s.prompts, s.image_size)
        result: EngineResult = (run_evidra if role == "evidra" else run_trl)(
            model, images, Path(tmp), steps, s
        )
    print_result(result)


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def _device_name(device: str) -> str:
    import torch

    if device == "cuda":
        return str(torch.cuda.get_device_name(0))
    threads = os.environ.get("OMP_NUM_THREADS", "?")
    return f"CPU ({platform.processor() or platform.machine()}, {threads} threads)"


def _row(r: dict[str, Any]) -> tuple[float, float, float, float]:
    """Median s/step, rollout tok/s (generation only), step tok/s and peak MB of one engine."""
    step = median(r["times"])
    tokens = median(r["tokens"]) if r["tokens"] else 0.0
    gen = median(r["gen_times"]) if r["gen_times"] else 0.0
    return step, tokens / gen if gen else float("nan"), tokens / step, r["peak_mb"]


def report(results: dict[str, dict[str, Any]], arch: str, s: Settings, steps: int, notes: list[str]) -> None:
    print(
        f"GRPO step, {arch}, {s.prompts} prompts x G={s.group}, {s.new_tokens} new tokens, one "
        f"{s.image_size}x{s.image_size} image per prompt, {s.dtype} compute (fp32 masters), "
        f"gradient checkpointing {'on' if s.gradient_checkpointing else 'off'}, "
        f"{'LoRA r=8' if s.lora else 'full fine-tuning'}, KL beta {s.beta}, "
        f"{steps} timed steps after 1 warm-up"
    )
    import torch

    print(
        f"device: {_device_name(s.device)}; torch {torch.__version__}, transformers "
        f"{_version('transformers')}, trl {_version('trl') or 'not installed'}"
    )
    for note in notes:
        print(f"note: {note}")
    mem = "peak GPU MB" if s.device == "cuda" else "peak RSS MB"
    print(f"\n| engine | median s/step | rollout tok/s | step tok/s | {mem} |")
    print("|---|---|---|---|---|")
    rows = {engine: _row(r) for engine, r in results.items()}
    for engine, (step, gen, tok, peak) in rows.items():
        print(f"| {engine} | {step:.3f} | {gen:.1f} | {tok:.1f} | {peak:.0f} |")
    for engine, r in results.items():  # evidra on a GPU: which pass holds the peak
        if r.get("phases"):
            names = {k: k.split("/")[1].removesuffix("_peak_gb") for k in r["phases"]}
            phases = ", ".join(f"{names[k]} {v:.1f}" for k, v in r["phases"].items())
            print(f"{engine} peak GB by phase: {phases}")
    if "trl" in rows and "evidra" in rows:
        (es, eg, _, em), (ts, tg, _, tm) = rows["evidra"], rows["trl"]
        print(
            f"\nTRL / evidra: step time {ts / es:.2f}x, rollout tok/s {tg / eg:.2f}x, "
            f"peak memory {tm / em:.2f}x"
        )
        print(f"RESULT trl_vs_evidra_step={ts / es:.2f} trl_vs_evidra_rollout_tok_s={tg / eg:.2f}")
    else:
        print("RESULT trl_vs_evidra_step=na trl_vs_evidra_rollout_tok_s=na")


def _parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", choices=[*ARCHS, "tiny"], help="default: qwen2.5-vl-3b on a GPU, tiny on a CPU")
    p.add_argument("--device", choices=["cuda", "cpu"], help="default: cuda when available")
    p.add_argument("--steps", type=int, help="timed steps per engine after 1 warm-up (3; tiny: 1)")
    p.add_argument("--prompts", type=int, help="prompts per step (4; tiny: 2)")
    p.add_argument("--group", type=int, help="completions per prompt, G (4; tiny: 2)")
    p.add_argument("--new-tokens", type=int, help="max new tokens per completion (256; tiny: 8)")
    p.add_argument("--micro-batch", type=int, help="completions per forward/backward (4)")
    p.add_argument("--image-size", type=int, help="square page image side in pixels (1024; tiny: 224)")
    p.add_argument("--max-pixels", type=int, help="processor cap (1024*28*28; tiny: 224*224)")
    p.add_argument("--beta", type=float, default=0.04, help="KL coefficient; 0: no reference model")
    p.add_argument("--lr", type=float, default=1e-6)
    p.add_argument("--lora", action="store_true", help="LoRA (r=8) instead of full fine-tuning")
    p.add_argument("--model-dir", type=Path, help="build the checkpoint here once and reuse it")
    p.add_argument("--engines", nargs="+", choices=["evidra", "trl"], default=["evidra", "trl"])
    p.add_argument("--count-params", action="store_true", help="print the parameter count and exit")
    p.add_argument("--worker", choices=["build", "evidra", "trl"], help=argparse.SUPPRESS)
    p.add_argument("--settings", help=argparse.SUPPRESS)
    return p.parse_args()


def _settings(args: argparse.Namespace) -> tuple[Settings, int, int]:
    import torch

    preset = PRESETS[args.arch]
    given = {
        "prompts": args.prompts,
        "group": args.group,
        "new_tokens": args.new_tokens,
        "micro_batch": args.micro_batch,
        "image_size": args.image_size,
    }
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    fields = {**preset.settings.__dict__, **{k: v for k, v in given.items() if v is not None}}
    s = Settings(**{**fields, "beta": args.beta, "lr": args.lr, "lora": args.lora, "device": device})
    steps = args.steps if args.steps is not None else preset.steps
    return s, steps, args.max_pixels or MAX_PIXELS.get(args.arch, 1024 * 28 * 28)


def _default_arch(args: argparse.Namespace) -> str:
    """``--arch`` as given, else the real 3B on a GPU (and for ``--count-params``), tiny on a CPU."""
    if args.arch:
        return str(args.arch)
    import torch

    gpu = (args.device or ("cuda" if torch.cuda.is_available() else "cpu")) == "cuda"
    return "qwen2.5-vl-3b" if gpu or args.count_params else "tiny"


def main() -> None:
    args = _parse()
    args.arch = _default_arch(args)
    if args.count_params:
        print(f"{args.arch}: {count_parameters(args.arch):,} parameters")
        return
    if args.worker:
        s = settings_from_json(args.settings)
        worker(args.worker, args.arch, args.model_dir, args.steps, s, args.max_pixels)
        return
    s, steps, max_pixels = _settings(args)
    notes = _notes(s, args.engines)
    engines = [e for e in args.engines if e != "trl" or _version("trl") is not None]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.setdefault("OMP_NUM_THREADS", "1")
    if s.device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model_dir or Path(tmp) / "model"
        common = [
            "--steps",
            str(steps),
            "--settings",
            settings_to_json(s),
            "--max-pixels",
            str(max_pixels),
            "--model-dir",
            str(model),
            "--arch",
            args.arch,
        ]
        if not (model / "config.json").is_file():
            _run_or_exit("build", [__file__, "--worker", "build", *common], env)
        results = {e: _run_or_exit(e, [__file__, "--worker", e, *common], env) for e in engines}
    report(results, args.arch, s, steps, notes)


def _notes(s: Settings, engines: list[str]) -> list[str]:
    notes = []
    if s.device == "cpu":
        notes.append("running on CPU: a smoke test of the GPU benchmark, not GPU performance")
    if "trl" in engines and _version("trl") is None:
        notes.append("TRL is not installed (pip install 'evidra[bench]'): evidra only")
    return notes


def _run_or_exit(role: str, argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    out, err = run_worker(argv, env)
    if out is None:
        print(f"{role} failed:\n{err}", file=sys.stderr)
        sys.exit(1)
    return out


if __name__ == "__main__":
    main()
