"""Configuration of RL and SFT runs: small nested frozen dataclasses, loaded from YAML.

Every component is chosen by registry name (task, advantage estimator, loss, aggregation, KL
estimator). Defaults follow GRPO as LAT and VRAG-RL train it; each paper's recipe in
``configs/`` overrides what its paper specifies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from evidra.models.vllm_backend import VLLMConfig


@dataclass(frozen=True)
class LoraConfig:
    enabled: bool = True
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0


@dataclass(frozen=True)
class ModelConfig:
    path: str = ""  # local checkpoint directory; "tiny:qwen2_5_vl" builds a tiny offline model
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    min_pixels: int | None = None
    max_pixels: int | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)
    freeze_vision: bool = True  # full fine-tuning only: keep the vision tower frozen
    gradient_checkpointing: bool = False


@dataclass(frozen=True)
class DataConfig:
    task: str = "toy.digits"  # registry name: dataset + environment + parser + reward
    path: str = ""  # the benchmark's files with ``source``; else the generated data's cache folder
    size: int = 64  # generated tasks: number of samples; with ``source``: at most this many, 0 = all
    seed: int = 0
    source: str = ""  # a benchmark loader (evidra.data.loaders, e.g. visa_wiki, slidevqa) reading path
    options: dict[str, Any] = field(default_factory=dict)  # loader options, e.g. {pool: train.jsonl}
    index: str = ""  # search tasks: an index directory (evidra index build) or a serve-index URL


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k truncation
    max_turns: int = 1
    max_new_tokens: int = 64  # per turn
    max_response_tokens: int = 512  # per episode, observations included
    backend: Literal["hf", "vllm"] = "hf"  # who generates: the policy's transformers model, or vLLM
    vllm: VLLMConfig = field(default_factory=VLLMConfig)  # backend=vllm: colocated engine or a server


@dataclass(frozen=True)
class AlgoConfig:
    advantage: str = "grpo"  # grpo | dr_grpo
    scale_by_std: bool = True
    policy_loss: str = "ppo_clip"  # ppo_clip | gspo
    loss_agg: str = (
        "token-mean"  # token-mean | seq-mean-token-mean | seq-mean-token-sum | seq-mean-token-sum-norm
    )
    clip_low: float = 0.2
    clip_high: float = 0.2  # DAPO clip-higher: 0.28
    dual_clip: float | None = None  # verl uses 3.0
    kl: Literal["none", "loss", "reward"] = "loss"  # where the KL term goes; "none": no reference model
    kl_coef: float = 0.001
    kl_estimator: str = "k3"
    ppo_epochs: int = 1  # policy updates per batch of rollouts
    dynamic_sampling: bool = False  # DAPO: drop groups whose rewards are all equal, refill
    max_sampling_rounds: int = 3


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, ...] = (0.9, 0.999)
    warmup_steps: int = 0
    max_grad_norm: float = 1.0


@dataclass(frozen=True)
class RunConfig:
    output_dir: str = "runs/rl"
    steps: int = 10
    batch_size: int = 8  # prompts per step (per process)
    micro_batch_size: int = 8  # episodes per forward/backward
    seed: int = 0
    save_every: int = 0  # steps between checkpoints; 0 = only at the end
    keep_checkpoints: int = 2
    resume: bool = True  # continue from the newest complete checkpoint in output_dir
    tensorboard: bool = False
    wandb_project: str = ""  # log to this Weights & Biases project (evidra[wandb]); empty: off


@dataclass(frozen=True)
class RLConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)


@dataclass(frozen=True)
class SFTConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4))
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/sft", steps=20))
    epochs: int = 1
