"""Configuration of RL and SFT runs: small nested frozen dataclasses, loaded from YAML.

Every component is chosen by registry name (method, advantage estimator, loss, aggregation, KL
estimator). Defaults follow GRPO as LAT and VRAG-RL train it; each paper's recipe in
``configs/`` overrides what its paper specifies. The ``method`` section (``name`` plus that
method's own options) is read and checked by ``evidra.methods``, which builds the task the
trainer is handed; the trainer reads none of it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from evidra.models.sampling import SamplingParams
from evidra.models.vllm_backend import VLLMConfig
from evidra.rewards.guards import GuardConfig

if TYPE_CHECKING:
    from evidra.rollout import RolloutLimits


@dataclass(frozen=True)
class LoraConfig:
    enabled: bool = True
    r: int = 8
    alpha: int = 16
    dropout: float = 0.0


@dataclass(frozen=True)
class ModelConfig:
    path: str = ""  # a checkpoint directory, a hub id (org/name[@rev]) or tiny:qwen2_5_vl (tiny, offline)
    # auto: bfloat16 where the device computes it fast (a GPU, a CPU with AVX-512 BF16 or AMX), else
    # float32 (evidra.rl.parallel.precision.auto_dtype)
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "float32"
    min_pixels: int | None = None
    max_pixels: int | None = None
    lora: LoraConfig = field(default_factory=LoraConfig)
    freeze_vision: bool = True  # full fine-tuning only: keep the vision tower frozen
    gradient_checkpointing: bool = False
    # SFT of ``path`` on the task's oracle conversations before RL starts, built once and cached
    # (evidra.rl.sft.cold_start; docs/training.md); steps 0: RL starts from ``path`` itself
    cold_start: ColdStartConfig = field(default_factory=lambda: ColdStartConfig())
    # ``dtype`` is the compute dtype. Full fine-tuning in bfloat16 keeps fp32 master weights and
    # runs forward/backward under bf16 autocast; LoRA keeps a bf16 base with fp32 adapters.


@dataclass(frozen=True)
class DataConfig:
    # a plain task (evidra.rl.tasks.TASKS: toy.digits, toy.length, toy.key_value) when method.name is
    # empty; a paper method is the method section (docs/methods.md)
    task: str = "toy.digits"
    path: str = ""  # the benchmark's files with ``source``; else the generated data's cache folder
    size: int = 64  # generated tasks: number of samples; with ``source``: at most this many, 0 = all
    seed: int = 0
    source: str = ""  # a benchmark loader (evidra.data.loaders, e.g. visa_wiki, slidevqa) reading path
    # generated samples instead: synthetic sources mixed in equal parts (`evidra eval --synthetic`
    # names: tracer.vjump, tunnel.chain, documents, ...; a family name, tracer or tunnel, takes all
    # of its scenarios), drawn into path (or the private cache); empty: the task's own data
    synthetic: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)  # loader options, e.g. {pool: train.jsonl}
    # a file of `evidra data filter`: train on the samples it keeps, a subset of the task's samples
    subset: str = ""
    # SFT only: a JSONL of conversations, trained on instead of the task's oracle conversations
    # (`evidra train sft --data FILE` sets it): distilled trajectories (evidra data distill), TRL /
    # OpenAI messages or LLaMA-Factory ShareGPT rows
    trajectories: str = ""

    # keys that moved into the method section are refused with their new spelling
    __moved_keys__: ClassVar[dict[str, str]] = {
        "index": "method.index",
        "pages_per_question": "method.pages_per_question",
        "toolbox": "method.toolbox",
    }
    # the file's format: auto (detected from its rows) | evidra | messages | sharegpt
    trajectories_format: str = "auto"


@dataclass(frozen=True)
class ColdStartConfig:
    """``model.cold_start``: a short SFT of the base model on the task's oracle conversations (the
    cold start the papers run before RL), full fine-tuning (of every weight, or of all but a warmed
    vision tower) at the run's dtype and pixel limits, then RL starts from it. Built once per set of inputs
    (base model, method section, pixel limits, these settings, evidra's version) and cached."""

    steps: int = 0  # SFT steps; 0: no cold start
    batch_size: int = 8  # conversations per step
    lr: float = 3e-3  # cosine decay to 0 after warmup_steps of linear warmup
    warmup_steps: int = 5
    seed: int = 0
    # a glyph warm-up of the vision tower before the SFT (evidra.models.vision_warmup): steps of 16
    # pages at vision_lr on the data's text layers; the SFT then keeps the tower frozen. 0: none, the
    # SFT trains every weight (a random tower learns no small glyphs that way)
    vision_steps: int = 0
    vision_lr: float = 2e-3
    # the conversations' samples: generated ones of ``synthetic`` (e.g. [reading]), ``size`` of them
    # drawn with ``seed`` (a stream apart from the RL samples' when it differs from data.seed)
    data: DataConfig = field(default_factory=lambda: DataConfig(size=256, seed=1))


@dataclass(frozen=True)
class RolloutConfig:
    group_size: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k truncation
    max_turns: int = 1
    max_new_tokens: int = 64  # per turn
    # no end-of-turn token before this many new tokens per turn (0: none); = max_new_tokens: every
    # turn has exactly that length, e.g. to time equal work (benchmarks/grpo_step.py)
    min_new_tokens: int = 0
    # per episode: everything after the prompt (observations included), or with max_context_tokens
    # > 0 the policy's own tokens only
    max_response_tokens: int = 512
    # > 0: a cap on the whole context (prompt, policy turns, observations) that observations count
    # against instead of max_response_tokens; 0: none (observations share max_response_tokens)
    max_context_tokens: int = 0
    backend: Literal["hf", "vllm"] = "hf"  # who generates: the policy's transformers model, or vLLM
    vllm: VLLMConfig = field(default_factory=VLLMConfig)  # backend=vllm: colocated engine or a server

    def sampling(self) -> SamplingParams:
        """How the policy samples each turn under these settings."""
        return SamplingParams(
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            min_new_tokens=self.min_new_tokens,
        )

    def limits(self) -> RolloutLimits:
        """The rollout loop's limits of these settings."""
        from evidra.rollout import RolloutLimits

        return RolloutLimits(
            self.max_turns, self.max_new_tokens, self.max_response_tokens, self.max_context_tokens
        )


@dataclass(frozen=True)
class AlgoConfig:
    # grpo | dr_grpo | rs_grpo (EVisRAG Eq. 7-9) | turn_credit (CAVE) | router: EVisRAG's released
    # RS-GRPO, each reward channel normalised on its own and its loss taken per scope | spo: MM-Doc-R1's
    # similarity-weighted baseline per turn
    advantage: str = "grpo"
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
    ppo_epochs: int = 1  # passes over each batch of rollouts
    # prompts per optimizer step (verl's ppo_mini_batch_size, global); 0: the whole batch, one step
    mini_batch_size: int = 0
    eps: float = 1e-6  # advantage std epsilon (verl/EasyR1 1e-6; TRL and LAT 1e-4)
    # "old" log-probs of the clipped ratio: recomputed by the trainer before the update ("recompute"),
    # the sampler's ("sampler"), or "auto": the sampler's only when exactly on-policy (one optimizer
    # step per batch and fp32), where they equal the trainer's; recomputed otherwise
    old_logprobs: Literal["auto", "recompute", "sampler"] = "auto"
    # truncated importance sampling against sampler/trainer mismatch: each token's loss is weighted by
    # min(exp(old_logp - sampler_logp), tis_cap) (verl's tis_imp_ratio_cap, e.g. 2.0); 0 disables it
    tis_cap: float = 0.0
    dynamic_sampling: bool = False  # DAPO: drop groups whose rewards are all equal, refill
    max_sampling_rounds: int = 3
    # dynamic sampling's rule: empty keeps groups whose rewards are not all equal (DAPO); [low, high]
    # keeps groups whose mean reward is strictly inside (EasyR1's online filter, e.g. [0.01, 0.99])
    keep_mean_range: tuple[float, ...] = ()
    # steps in a row whose groups each earned a single reward (every advantage 0: nothing learns,
    # e.g. a base model that never earns one) before one warning; 0: never warn
    warn_no_variance_after: int = 3
    # Mini-o3's over-turn masking: an episode cut at the turn cap or by the token/context limits adds
    # no policy loss (nor KL term); its reward still enters its group's baseline. The count masked is
    # logged per step as episode/over_turn_masked
    mask_truncated: bool = False


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-5
    weight_decay: float = 0.0
    betas: tuple[float, ...] = (0.9, 0.999)
    warmup_steps: int = 0  # optimizer steps of linear warmup from 0
    warmup_ratio: float = 0.0  # or a fraction of all optimizer steps (used when warmup_steps is 0)
    schedule: Literal["constant", "linear", "cosine"] = "constant"  # after warmup: decay to 0 or not
    max_grad_norm: float = 1.0


@dataclass(frozen=True)
class RunConfig:
    output_dir: str = "runs/rl"
    steps: int = 10
    batch_size: int = 8  # prompts per step, over all processes (each takes batch_size / processes)
    micro_batch_size: int = 8  # episodes (RL) or conversations (SFT) per forward/backward, per process
    # fsdp2: PyTorch FSDP2 shards policy (and reference) over processes; zero3: DeepSpeed ZeRO-3
    sharding: Literal["none", "fsdp2", "zero3"] = "none"
    seed: int = 0
    save_every: int = 0  # steps between checkpoints; 0 = only at the end
    keep_checkpoints: int = 2
    max_bad_steps: int = 3  # steps in a row with a non-finite loss or gradient before the run stops
    resume: bool = True  # continue from the newest complete checkpoint in output_dir
    # where each step's scalars go: jsonl (metrics.jsonl, always written), tensorboard
    # (<output_dir>/tensorboard, evidra[tensorboard]), wandb (Weights & Biases, evidra[wandb])
    report_to: tuple[str, ...] = ("jsonl",)
    wandb_project: str = ""  # the W&B project when report_to names wandb; empty: "evidra"

    # the undocumented switches report_to replaced are refused with the spelling to use instead
    __replaced_keys__: ClassVar[dict[str, str]] = {"tensorboard": "report_to=[jsonl, tensorboard]"}


@dataclass(frozen=True)
class RewardConfig(GuardConfig):
    """The ``reward:`` section: the reward-hacking guards (``GuardConfig``)."""

    __moved_keys__: ClassVar[dict[str, str]] = {"mode": "method.reward_mode"}


@dataclass(frozen=True)
class RLConfig:
    # the paper method (``name``: evidra.methods.METHODS) and its own options, checked by that method's
    # options class (docs/methods.md); empty: the plain task data.task names
    method: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    run: RunConfig = field(default_factory=RunConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)  # reward variant, hacking guards (off)
    # overrides of the sections above for the SFT stage of the same recipe (``evidra train sft``),
    # e.g. {optim: {lr: 5.0e-7, schedule: cosine}, epochs: 3}; checked when the recipe loads
    sft: dict[str, Any] = field(default_factory=dict)

    # a recipe's ``sft`` section is validated as SFTConfig overrides whenever the recipe loads
    __stage_sections__: ClassVar[tuple[str, ...]] = ()
    __moved_keys__: ClassVar[dict[str, str]] = {"judge": "method.judge"}


@dataclass(frozen=True)
class SFTConfig:
    """The SFT stage. It reads the same recipe file as RL: the ``sft`` section is merged over the
    shared sections before command-line overrides; ``rollout``, ``algo`` and ``reward`` are accepted
    and unused; ``method`` builds the task whose oracle conversations are trained on."""

    method: dict[str, Any] = field(default_factory=dict)
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=lambda: OptimConfig(lr=1e-4))
    run: RunConfig = field(default_factory=lambda: RunConfig(output_dir="runs/sft", steps=20))
    epochs: int = 1  # with run.steps = 0: steps = ceil(epochs x examples / batch_size)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    sft: dict[str, Any] = field(default_factory=dict)

    __stage_sections__: ClassVar[tuple[str, ...]] = ("sft",)
    __moved_keys__: ClassVar[dict[str, str]] = {"judge": "method.judge"}
