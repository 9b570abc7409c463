"""What the GRPO step benchmarks share: the task, one settings record, and both engines' runners.

``grpo_step.py`` (tiny model, CPU, fp32) and ``grpo_step_gpu.py`` (real Qwen2.5-VL sizes, bf16)
run evidra's ``RLTrainer`` and TRL's ``GRPOTrainer`` on the same prompts, images, reward and
hyper-parameters, each engine in its own process (``run_worker``) so peak memory is its own.
Each runner returns the wall time of every step (the first one is warm-up and dropped), the
completion tokens generated per step and the time spent generating them. With
``Settings.fixed_length`` both engines sample exactly ``new_tokens`` per completion (no
end-of-turn token before that: evidra's ``rollout.min_new_tokens``, transformers'
``min_new_tokens``, vLLM's ``min_tokens``), so their steps do the same work. A ``Pacer`` lets a
caller start each step and read its figures as it ends (``grpo_step.py`` alternates the engines
step by step, so a busy spell on a shared machine slows both).

Not a script: imported by the two benchmarks (which run with ``benchmarks/`` on ``sys.path``).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

TASK = "bench.image_length"


@dataclass(frozen=True)
class Settings:
    """One GRPO step, identical for both engines."""

    prompts: int = 8  # prompts per optimizer step
    group: int = 4  # completions per prompt (G)
    new_tokens: int = 32  # max new tokens per completion
    micro_batch: int = 32  # completions per forward/backward
    beta: float = 0.04  # KL coefficient (k3 in the loss); 0: no reference model
    lr: float = 1e-5
    temperature: float = 1.0
    image_size: int = 224  # square page image, before the processor's max_pixels cap
    dtype: str = "float32"  # compute dtype; bfloat16 keeps fp32 master weights in both engines
    gradient_checkpointing: bool = False
    lora: bool = False  # LoRA r=8 alpha=16 on the language model's projections, else full fine-tuning
    train_vision: bool = False  # full fine-tuning only
    device: str = "cpu"  # cpu | cuda
    vllm: bool = False  # generate with a colocated vLLM engine (both engines), else transformers
    vllm_memory: float = 0.25  # the share of GPU memory the colocated engine may take
    vllm_max_len: int = 2048  # its longest sequence (prompt + completion)
    fixed_length: bool = False  # every completion exactly new_tokens long (end-of-turn suppressed)

    @property
    def accumulation(self) -> int:
        return max(1, self.prompts * self.group // self.micro_batch)


@dataclass(frozen=True)
class EngineResult:
    engine: str
    times: list[float]  # seconds per timed step
    tokens: list[int]  # completion tokens generated per timed step
    gen_times: list[float]  # seconds spent generating, per timed step (empty: not measured)
    peak_mb: float  # peak GPU memory allocated (cuda) or peak RSS (cpu)
    phases: dict[str, float] = field(default_factory=dict)  # evidra on a GPU: peak GB per phase


@dataclass(frozen=True)
class StepFigures:
    """One step as it ends: wall seconds, completion tokens, seconds spent generating them, and
    the CPU seconds the process used (time slices taken by other processes do not count)."""

    step_s: float
    tokens: int
    gen_s: float
    cpu_s: float = 0.0


class Pacer(Protocol):
    """Starts each step (``wait`` returns when it may run) and hears how it went (``done``)."""

    def wait(self) -> None: ...

    def done(self, figures: StepFigures) -> None: ...


def question(i: int) -> str:
    return f"Describe region {i} of the page and give its total."


def length_reward(text: str) -> float:
    return min(1.0, len(text) / 100)


def write_images(workdir: Path, n: int, size: int) -> list[Path]:
    """``n`` random RGB pages of ``size`` x ``size`` pixels (noise: no image compresses away)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    paths = []
    for i in range(n):
        path = workdir / f"img{i}.png"
        Image.fromarray(rng.integers(0, 255, (size, size, 3), dtype=np.uint8)).save(path)
        paths.append(path)
    return paths


def run_evidra(
    model: Path, images: list[Path], workdir: Path, steps: int, s: Settings, pacer: Pacer | None = None
) -> EngineResult:
    """``steps`` timed GRPO steps of evidra's ``RLTrainer`` after one warm-up step."""
    from evidra.core.config import load_config
    from evidra.core.types import Page, Parsed, Sample
    from evidra.env import SingleTurnEnv
    from evidra.paradigms import Direct
    from evidra.rewards.reward import RewardResult
    from evidra.rl.run_config import RLConfig
    from evidra.rl.tasks import TASKS, Task
    from evidra.rl.trainer import RLTrainer

    size = s.image_size
    samples = [
        Sample(id=f"b{i}", question=question(i), pages=(Page(f"img{i}-p0001", str(p), size, size),))
        for i, p in enumerate(images)
    ]
    TASKS.add(
        TASK,
        Task(
            name=TASK,
            samples=lambda cfg: samples,
            make_env=lambda s: SingleTurnEnv(Direct()),
            parse=lambda text: Parsed(text=text),
            reward=lambda parsed, sample, traj=None: RewardResult(total=length_reward(parsed.text)),
        ),
        overwrite=True,
    )
    kl = f"algo.kl=loss algo.kl_coef={s.beta}" if s.beta > 0 else "algo.kl=none"
    vllm = [
        "rollout.backend=vllm",
        f"rollout.vllm.gpu_memory_utilization={s.vllm_memory}",
        f"rollout.vllm.max_model_len={s.vllm_max_len}",
    ]
    cfg = load_config(
        RLConfig,
        None,
        [
            f"model.path={model}",
            f"model.dtype={s.dtype}",
            f"model.lora.enabled={str(s.lora).lower()}",
            f"model.freeze_vision={str(not s.train_vision).lower()}",
            f"model.gradient_checkpointing={str(s.gradient_checkpointing).lower()}",
            f"run.output_dir={workdir / 'run'}",
            f"run.steps={steps + 1}",
            f"run.batch_size={s.prompts}",
            f"run.micro_batch_size={s.micro_batch}",
            f"rollout.group_size={s.group}",
            f"rollout.max_new_tokens={s.new_tokens}",
            f"rollout.min_new_tokens={s.new_tokens if s.fixed_length else 0}",
            f"rollout.max_response_tokens={s.new_tokens}",
            f"rollout.temperature={s.temperature}",
            *kl.split(),
            "algo.kl_estimator=k3",
            "algo.loss_agg=token-mean",
            f"optim.lr={s.lr}",
            f"data.task={TASK}",
            "run.save_every=0",
            "run.resume=false",
            *(vllm if s.vllm else []),
        ],
    )
    figures: list[StepFigures] = []
    phases: dict[str, float] = {}  # the trainer's per-phase peaks (GPU): it resets torch's peak each step
    trainer = RLTrainer(cfg)
    for _ in range(steps + 1):  # step() alone: the step is timed, not the checkpoint that train() ends with
        if pacer is not None:
            pacer.wait()
        start, cpu = time.perf_counter(), time.process_time()
        metrics = trainer.step()
        step_s, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        tokens = round(metrics.get("episode/policy_tokens", 0.0) * s.prompts * s.group)
        figures.append(StepFigures(step_s, tokens, metrics.get("time/rollout_s", 0.0), cpu_s))
        for key in ("memory/rollout_peak_gb", "memory/update_peak_gb"):
            if key in metrics:
                phases[key] = max(phases.get(key, 0.0), metrics[key])
        if pacer is not None:
            pacer.done(figures[-1])
    peak = max([peak_mb(s.device), *(gb * 1e9 / 2**20 for gb in phases.values())])
    return _result("evidra", figures[1:], peak, phases)


def _result(
    engine: str, figures: list[StepFigures], peak: float, phases: dict[str, float] | None = None
) -> EngineResult:
    times, tokens, gen = ([getattr(f, k) for f in figures] for k in ("step_s", "tokens", "gen_s"))
    return EngineResult(engine, times, tokens, [g for g in gen if g >= 0], peak, phases or {})


def _trl_policy(model: Path, s: Settings) -> Any:
    """The policy TRL trains: fp32 masters (full fine-tuning) or a bf16 base (LoRA); a frozen vision
    tower stored in the compute dtype, as evidra stores it."""
    import torch
    from transformers import AutoModelForImageTextToText

    compute = getattr(torch, s.dtype)
    policy = AutoModelForImageTextToText.from_pretrained(
        str(model), dtype=compute if s.lora else torch.float32
    )
    for name, param in policy.named_parameters():
        if not s.lora and not s.train_vision and ".visual." in f".{name}":
            param.requires_grad_(False)
            param.data = param.data.to(compute)
    return policy


def _trl_args(workdir: Path, steps: int, s: Settings) -> Any:
    from trl import GRPOConfig

    bf16 = s.dtype == "bfloat16"
    return GRPOConfig(
        output_dir=str(workdir / "trl"),
        per_device_train_batch_size=s.micro_batch,
        gradient_accumulation_steps=s.accumulation,
        num_generations=s.group,
        max_completion_length=s.new_tokens,
        beta=s.beta,
        learning_rate=s.lr,
        loss_type="dapo",
        epsilon=0.2,
        max_steps=steps + 1,
        use_cpu=s.device == "cpu",
        bf16=bf16,
        fp16=False,
        gradient_checkpointing=s.gradient_checkpointing,
        gradient_checkpointing_kwargs={"use_reentrant": False} if s.gradient_checkpointing else None,
        # the reference is built from the checkpoint path: stored in the compute dtype, as evidra's
        model_init_kwargs={"dtype": s.dtype} if bf16 and not s.lora else None,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        temperature=s.temperature,
        seed=0,
        dataloader_num_workers=0,
        use_vllm=s.vllm,
        **(_trl_vllm_args(s) if s.vllm else {}),
        # fixed lengths: no end-of-turn token before new_tokens (transformers' name, vLLM's name)
        generation_kwargs={"min_tokens" if s.vllm else "min_new_tokens": s.new_tokens}
        if s.fixed_length
        else None,
    )


def _trl_vllm_args(s: Settings) -> dict[str, Any]:
    """TRL's colocated vLLM at the settings evidra's engine gets (sleeping during the update)."""
    return {
        "vllm_mode": "colocate",
        "vllm_gpu_memory_utilization": s.vllm_memory,
        "vllm_max_model_length": s.vllm_max_len,
        "vllm_enable_sleep_mode": True,
    }


def run_trl(
    model: Path, images: list[Path], workdir: Path, steps: int, s: Settings, pacer: Pacer | None = None
) -> EngineResult:
    """``steps`` timed GRPO steps of TRL's ``GRPOTrainer`` after one warm-up step."""
    from datasets import Dataset
    from PIL import Image
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from evidra.models.loading import load_processor

    rows = [
        {
            "prompt": [
                {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": question(i)}]}
            ],
            "image": Image.open(p).convert("RGB"),
        }
        for i, p in enumerate(images)
    ]
    tokens: list[int] = []

    def reward(
        completions: list[Any], completion_ids: list[list[int]] | None = None, **_: Any
    ) -> list[float]:
        tokens.append(sum(len(ids) for ids in completion_ids or []))
        texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
        return [length_reward(t) for t in texts]

    figures: list[StepFigures] = []
    gen: list[float] = []  # seconds of each _generate call

    class Timer(TrainerCallback):  # type: ignore[misc]
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            if pacer is not None:
                pacer.wait()
            self.last, self.cpu = time.perf_counter(), time.process_time()
            self.generated = len(gen)

        def on_step_end(self, *a: Any, **k: Any) -> None:
            step_s, cpu_s = time.perf_counter() - self.last, time.process_time() - self.cpu
            gen_s = sum(gen[self.generated :]) if gen else -1.0  # -1: TRL renamed _generate
            figures.append(StepFigures(step_s, tokens[-1] if tokens else 0, gen_s, cpu_s))
            if pacer is not None:
                pacer.done(figures[-1])

    peft = None
    if s.lora:
        from peft import LoraConfig

        from evidra.models.adapters import LoraSpec

        peft = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LoraSpec().target_regex())
    trainer = GRPOTrainer(
        model=_trl_policy(model, s),
        reward_funcs=reward,
        args=_trl_args(workdir, steps, s),
        train_dataset=Dataset.from_list(rows),
        processing_class=load_processor(model, "qwen2_5_vl"),
        callbacks=[Timer()],
        peft_config=peft,
    )
    _time_generation(trainer, gen)
    trainer.train()
    return _result("trl", figures[1:], peak_mb(s.device))


def _time_generation(trainer: Any, out: list[float]) -> None:
    """Append the seconds of each call of TRL's (private) ``_generate`` to ``out``; it stays empty
    if TRL renamed it."""
    inner = getattr(trainer, "_generate", None)
    if inner is None:
        return

    def timed(*a: Any, **k: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            out.append(time.perf_counter() - start)

    trainer._generate = timed


def peak_mb(device: str) -> float:
    """Peak GPU memory allocated by this process (cuda), else its peak resident set size."""
    import resource

    import torch

    if device == "cuda":
        return float(torch.cuda.max_memory_allocated()) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def settings_to_json(s: Settings) -> str:
    return json.dumps(asdict(s))


def settings_from_json(text: str) -> Settings:
    return Settings(**json.loads(text))


def run_worker(argv: list[str], env: dict[str, str]) -> tuple[dict[str, Any] | None, str]:
    """Run ``python argv`` and return the JSON after its ``RESULT `` line (None on failure) and its
    stderr tail."""
    proc = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        return None, proc.stderr[-3000:]
    return json.loads(line[len("RESULT ") :]), ""


def print_result(result: EngineResult) -> None:
    print("RESULT " + json.dumps(asdict(result)), flush=True)
