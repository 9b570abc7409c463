"""Check a whole training config before anything heavy loads.

Every registry name (advantage estimator, policy loss, loss aggregation, KL estimator,
benchmark loader) and every numeric option is checked here, so a typo fails in a second with
a "did you mean", not after the model has loaded and a rollout has run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from evidra.core.config import from_dict, merge_sections, to_dict
from evidra.core.errors import ConfigError, InvalidInputError, RegistryError
from evidra.core.registry import Registry
from evidra.rewards.guards import GuardConfig
from evidra.rl.parallel.precision import training_precision
from evidra.rl.run_config import (
    AlgoConfig,
    ColdStartConfig,
    DataConfig,
    OptimConfig,
    RLConfig,
    RolloutConfig,
    RunConfig,
    SFTConfig,
)
from evidra.rl.tasks import Task
from evidra.safeio.sink import check_report_to


def _known(registry: Registry[Any], name: str, key: str) -> None:
    try:
        registry.get(name)
    except RegistryError as exc:
        raise ConfigError(f"{key}: {exc.args[0]}") from None


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def _check_run(run: RunConfig) -> None:
    _check(run.steps >= 0, f"run.steps must be >= 0, got {run.steps}")
    _check(run.batch_size >= 1, f"run.batch_size must be >= 1, got {run.batch_size}")
    _check(run.micro_batch_size >= 1, f"run.micro_batch_size must be >= 1, got {run.micro_batch_size}")
    _check(run.save_every >= 0, f"run.save_every must be >= 0 (0: only at the end), got {run.save_every}")
    _check(run.keep_checkpoints >= 0, f"run.keep_checkpoints must be >= 0, got {run.keep_checkpoints}")
    if run.sharding == "zero3":
        from evidra.rl.parallel.zero3 import require_deepspeed

        require_deepspeed()  # the extra to install, before any model loads
    _check_report_to(run)


def _check_report_to(run: RunConfig) -> None:
    """Known destinations with their libraries installed; a W&B project only when W&B logs."""
    check_report_to(run.report_to)
    _check(
        not run.wandb_project or "wandb" in run.report_to,
        f"run.wandb_project={run.wandb_project!r} names a W&B project, but run.report_to="
        f"[{', '.join(run.report_to)}] has no wandb; add wandb to run.report_to or clear "
        "run.wandb_project",
    )


def _check_optim(optim: OptimConfig, where: str = "optim") -> None:
    _check(optim.lr > 0, f"{where}.lr must be > 0, got {optim.lr}")
    _check(optim.weight_decay >= 0, f"{where}.weight_decay must be >= 0, got {optim.weight_decay}")
    _check(
        len(optim.betas) == 2 and all(0 <= b < 1 for b in optim.betas),
        f"{where}.betas must be two numbers in [0, 1), got {list(optim.betas)}",
    )
    _check(optim.warmup_steps >= 0, f"{where}.warmup_steps must be >= 0, got {optim.warmup_steps}")
    _check(0 <= optim.warmup_ratio < 1, f"{where}.warmup_ratio must be in [0, 1), got {optim.warmup_ratio}")
    _check(optim.max_grad_norm > 0, f"{where}.max_grad_norm must be > 0, got {optim.max_grad_norm}")


def _check_guards(g: GuardConfig) -> None:
    for key in ("max_answer_words", "max_candidates", "copy_min_words"):
        _check(getattr(g, key) >= 1, f"reward.{key} must be >= 1, got {getattr(g, key)}")
    _check(0 < g.max_box_area <= 1, f"reward.max_box_area must be in (0, 1], got {g.max_box_area}")
    _check(
        0 < g.max_copy_overlap <= 1, f"reward.max_copy_overlap must be in (0, 1], got {g.max_copy_overlap}"
    )


def _check_rollout(r: RolloutConfig) -> None:
    _check(r.group_size >= 1, f"rollout.group_size must be >= 1, got {r.group_size}")
    _check(r.temperature > 0, f"rollout.temperature must be > 0, got {r.temperature}")
    _check(0 < r.top_p <= 1, f"rollout.top_p must be in (0, 1], got {r.top_p}")
    _check(r.top_k >= 0, f"rollout.top_k must be >= 0 (0: off), got {r.top_k}")
    _check(r.max_turns >= 1, f"rollout.max_turns must be >= 1, got {r.max_turns}")
    _check(r.max_new_tokens >= 1, f"rollout.max_new_tokens must be >= 1, got {r.max_new_tokens}")
    m = r.min_new_tokens
    _check(0 <= m <= r.max_new_tokens, f"rollout.min_new_tokens must be in [0, max_new_tokens], got {m}")
    n = r.max_response_tokens
    _check(n >= 1, f"rollout.max_response_tokens must be >= 1, got {n}")
    c = r.max_context_tokens
    _check(c >= 0, f"rollout.max_context_tokens must be >= 0 (0: no cap of its own), got {c}")
    if r.backend == "vllm" and c > 0:  # the engine refuses a context longer than its own limit
        _check(
            c <= r.vllm.max_model_len,
            f"rollout.max_context_tokens={c} exceeds rollout.vllm."
            f"max_model_len={r.vllm.max_model_len}; raise max_model_len to at least {c}",
        )


def _check_algo(a: AlgoConfig, batch_size: int) -> None:
    from evidra.rl.algo.estimators import ADVANTAGES
    from evidra.rl.algo.kl import KL_ESTIMATORS
    from evidra.rl.algo.losses import LOSS_AGGREGATIONS, POLICY_LOSSES

    _known(ADVANTAGES, a.advantage, "algo.advantage")
    _known(POLICY_LOSSES, a.policy_loss, "algo.policy_loss")
    _known(LOSS_AGGREGATIONS, a.loss_agg, "algo.loss_agg")
    _known(KL_ESTIMATORS, a.kl_estimator, "algo.kl_estimator")
    _check(
        a.clip_low >= 0 and a.clip_high >= 0,
        f"algo.clip_low/clip_high must be >= 0, got {a.clip_low}, {a.clip_high}",
    )
    _check(a.dual_clip is None or a.dual_clip > 1, f"algo.dual_clip must be > 1 or null, got {a.dual_clip}")
    _check(
        a.policy_loss != "gspo" or a.dual_clip is None,
        "algo.policy_loss=gspo has no dual clip; set algo.dual_clip=null",
    )
    _check(a.kl_coef >= 0, f"algo.kl_coef must be >= 0, got {a.kl_coef}")
    _check(a.eps > 0, f"algo.eps must be > 0, got {a.eps}")
    band = list(a.keep_mean_range)
    _check(
        not band or (len(band) == 2 and band[0] < band[1]),
        f"algo.keep_mean_range must be empty or [low, high] with low < high, got {band}",
    )
    _check(a.ppo_epochs >= 1, f"algo.ppo_epochs must be >= 1, got {a.ppo_epochs}")
    _check(a.tis_cap >= 0, f"algo.tis_cap must be >= 0 (0: off), got {a.tis_cap}")
    _check(a.max_sampling_rounds >= 1, f"algo.max_sampling_rounds must be >= 1, got {a.max_sampling_rounds}")
    flat = a.warn_no_variance_after
    _check(flat >= 0, f"algo.warn_no_variance_after must be >= 0 (0: never warn), got {flat}")
    m = a.mini_batch_size
    _check(m >= 0, f"algo.mini_batch_size must be >= 0 (0: the whole batch), got {m}")
    message = f"algo.mini_batch_size={m} (prompts per optimizer step) must divide run.batch_size={batch_size}"
    _check(m == 0 or batch_size % m == 0, message)


def _check_data(data: DataConfig, stage: str) -> None:
    if data.source:
        from evidra.data.loaders import LOADERS

        _known(LOADERS, data.source, "data.source")
    _check(data.size >= 0, f"data.size must be >= 0, got {data.size}")
    if data.synthetic:
        _check_synthetic(data)
    if data.subset:
        from evidra.rl.subset import read_subset

        read_subset(data.subset)
    if data.trajectories:
        _check(stage == "sft", "data.trajectories is SFT data; pass it to `evidra train sft --data FILE`")
        where = f"data.trajectories: no file {data.trajectories!r}"
        fix = "pass a JSONL of messages or ShareGPT rows, or write one with `evidra data distill`"
        _check(Path(data.trajectories).is_file(), f"{where}; {fix}")
    if data.trajectories_format != "auto":
        from evidra.rl.sft.formats import SFT_FORMATS

        _known(SFT_FORMATS, data.trajectories_format, "data.trajectories_format")


def _check_synthetic(data: DataConfig) -> None:
    from evidra.data.synth.sources import expand

    _check(not data.source, "data.source and data.synthetic both name the training data; keep one")
    _check(data.size >= 1, f"data.synthetic draws data.size samples; set data.size >= 1, got {data.size}")
    try:
        expand(data.synthetic)
    except (RegistryError, InvalidInputError) as exc:
        raise ConfigError(f"data.synthetic: {exc}") from None


def validate_rl_config(cfg: RLConfig, task: Task) -> None:
    """Raise a one-line ``ConfigError`` for the first wrong name or value in ``cfg`` trained on
    ``task`` (the method's own options are checked when its task is built, ``evidra.methods``)."""
    _check_data(cfg.data, "rl")
    _check(
        not cfg.data.synthetic or task.from_synthetic is not None,
        f"task {task.name!r} trains on its own generated data only; remove data.synthetic",
    )
    _check_run(cfg.run)
    _check_optim(cfg.optim)
    _check_rollout(cfg.rollout)
    _check_algo(cfg.algo, cfg.run.batch_size)
    _check_guards(cfg.reward)
    if cfg.run.sharding == "zero3" and cfg.rollout.backend != "hf":
        raise ConfigError(
            "run.sharding=zero3 samples with the trainer's own gathered weights: set rollout.backend=hf "
            "(or run.sharding=none|fsdp2 with vLLM)"
        )
    _check_scoped(cfg.algo, task)
    check_cold_start(cfg.model.cold_start, task)
    training_precision(cfg.model)
    try:  # the recipe's sft section must make a valid SFT config too
        validate_sft_config(sft_stage(cfg))
    except ConfigError as exc:
        raise ConfigError(f"the recipe's SFT stage (section sft): {exc}") from None


def _check_scoped(a: AlgoConfig, task: Task) -> None:
    """Estimators that read reward channels need a task with scopes; ``router`` takes its loss per
    scope, each a token mean over its scope's tokens, so the aggregation must be token-mean."""
    from evidra.rl.algo.estimators import ADVANTAGES

    est = ADVANTAGES.get(a.advantage)
    if est.needs_scopes and not task.scope_names:
        raise ConfigError(
            f"algo.advantage={a.advantage} needs a task with scoped rewards; {task.name!r} has none"
        )
    _check(
        not est.per_scope_loss or a.loss_agg == "token-mean",
        f"algo.advantage={a.advantage} takes a token mean per scope (EVisRAG's released loss); set "
        f"algo.loss_agg=token-mean, not {a.loss_agg}",
    )


def sft_stage(cfg: RLConfig) -> SFTConfig:
    """The SFT config the same recipe gives (its ``sft`` section merged over the rest)."""
    data = to_dict(cfg)
    return from_dict(SFTConfig, merge_sections(data, data.get("sft") or {}))


def validate_sft_config(cfg: SFTConfig) -> None:
    """The SFT stage's own names and values (its task, when it needs one, is checked where it is
    built: ``evidra.methods`` or ``evidra.rl.tasks.plain_task``)."""
    _check_data(cfg.data, "sft")
    _check_run(cfg.run)
    _check_optim(cfg.optim)
    _check(cfg.epochs >= 1, f"epochs must be >= 1, got {cfg.epochs}")
    training_precision(cfg.model)


def local_batch_size(cfg: RLConfig | SFTConfig, processes: int) -> int:
    """This process's share of the global ``run.batch_size`` (an error if it does not divide)."""
    if cfg.run.batch_size % processes:
        raise ConfigError(
            f"run.batch_size={cfg.run.batch_size} is the global number of prompts per step and must be "
            f"divisible by the {processes} processes; use a multiple of {processes}"
        )
    mini = cfg.algo.mini_batch_size
    if mini and mini % processes:
        raise ConfigError(f"algo.mini_batch_size={mini} must be divisible by the {processes} processes")
    return cfg.run.batch_size // processes


def check_cold_start(cold: ColdStartConfig, task: Task) -> None:
    """One-line errors for a cold start that cannot run, before anything loads."""
    if cold.steps < 0 or cold.batch_size < 1 or cold.warmup_steps < 0:
        raise ConfigError(
            f"model.cold_start needs steps >= 0, batch_size >= 1 and warmup_steps >= 0, got steps "
            f"{cold.steps}, batch_size {cold.batch_size}, warmup_steps {cold.warmup_steps}"
        )
    if not cold.lr > 0:
        raise ConfigError(f"model.cold_start.lr must be > 0, got {cold.lr}")
    if cold.vision_steps < 0 or not cold.vision_lr > 0:
        raise ConfigError(
            f"model.cold_start needs vision_steps >= 0 and vision_lr > 0, got vision_steps "
            f"{cold.vision_steps}, vision_lr {cold.vision_lr}"
        )
    if cold.steps and task.oracle is None:
        raise ConfigError(
            f"task {task.name!r} has no oracle conversations to cold-start from; set model.cold_start.steps=0"
        )
    if cold.data.synthetic and task.from_synthetic is None:
        raise ConfigError(
            f"task {task.name!r} trains on its own generated data only; remove "
            "model.cold_start.data.synthetic"
        )
