"""Cold start, then GRPO, on one task: the recipe of the papers in miniature.

``cold_start_then_grpo`` fine-tunes a checkpoint on the task's oracle conversations (SFT),
then runs GRPO with the task's reward from the SFT model, and measures the task reward on
held-out samples (another data seed) before training, after SFT and after RL, keeping the
answers it scored. The demo uses it with LAT's rewards on synthetic documents and the tiny model
(its report shows some of those answers); the numbers are whatever they measure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from evidra.core.config import load_config
from evidra.core.types import Sample
from evidra.models.generation import SamplingParams
from evidra.models.loading import VLM, load_vlm
from evidra.rl.episode_scoring import score_episodes
from evidra.rl.run_config import DataConfig, RLConfig, SFTConfig
from evidra.rl.tasks import Task
from evidra.rollout import HFBackend, RolloutLimits, rollout

Progress = Callable[[str], None]


@dataclass(frozen=True)
class HeldOut:
    """Mean reward and components of greedy answers on held-out samples, and the answers."""

    reward: float
    components: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    outputs: tuple[str, ...] = ()  # the final answer text to each held-out sample, in order
    truncated: tuple[bool, ...] = ()  # per answer: cut at max_new_tokens


@dataclass(frozen=True)
class LearningResult:
    before: HeldOut
    after_sft: HeldOut
    after_rl: HeldOut
    sft_loss: tuple[float, ...]
    rl_reward: tuple[float, ...]  # mean training reward per RL step
    model_dir: Path  # the final policy (SFT export + RL checkpoints live beside it)
    held_out_samples: tuple[Sample, ...] = ()  # what before, after_sft and after_rl answered


def held_out_data(data: DataConfig, size: int) -> DataConfig:
    """The held-out samples' data: the training data's generator with another seed."""
    return replace(data, seed=data.seed + 1000, size=size)


def evaluate_task(vlm: VLM, task: Task, samples: Sequence[Sample], max_new_tokens: int) -> HeldOut:
    """Greedy answers for ``samples`` through the task's environment, scored by its reward."""
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0)
    limits = RolloutLimits(max_turns=1, max_new_tokens=max_new_tokens, max_response_tokens=max_new_tokens)
    vlm.model.eval()
    episodes = rollout(HFBackend(vlm), task.make_env, samples, 1, params, limits)
    results, _ = score_episodes(task, vlm, episodes)
    scored = [r for r in results if r.scored] or results
    keys = sorted({k for r in scored for k in r.components})
    components = {k: sum(r.components.get(k, 0.0) for r in scored) / len(scored) for k in keys}
    outputs = tuple(ep.trajectory.texts[-1] if ep.trajectory.texts else "" for ep in episodes)
    truncated = tuple(ep.trajectory.truncated for ep in episodes)
    mean = sum(r.total for r in scored) / len(scored)
    return HeldOut(mean, components, len(scored), outputs, truncated)


def cold_start_then_grpo(
    task: Task,
    base_model: str | Path,
    out_dir: str | Path,
    *,
    data: DataConfig,
    overrides: Sequence[str] = (),
    held_out: int = 8,
    sft_steps: int = 60,
    sft_batch_size: int = 8,
    rl_steps: int = 15,
    max_new_tokens: int = 96,
    rl_lr: float = 1e-4,
    temperature: float = 0.7,
    progress: Progress | None = None,
) -> LearningResult:
    """SFT on ``task``'s oracle conversations, then GRPO; held-out reward before, after SFT, after
    RL. ``overrides`` go into both stages' configs (e.g. the ``method`` section ``task`` was built
    from, so the configs written beside the checkpoints name it)."""
    from evidra.rl.sft.finetune import SFTTrainer
    from evidra.rl.trainer import RLTrainer

    say = progress or (lambda _m: None)
    out = Path(out_dir)
    task_name = task.name
    test = task.samples(held_out_data(data, held_out))
    common = [
        *overrides,
        f"data.path={data.path}",
        f"data.size={data.size}",
        f"data.seed={data.seed}",
        "model.lora.enabled=false",
    ]
    say(f"held-out reward of the base model on {len(test)} {task_name} samples")
    before = evaluate_task(load_vlm(base_model), task, test, max_new_tokens)
    say(f"SFT cold start: {sft_steps} steps on {task_name} oracle conversations")
    sft_cfg = load_config(
        SFTConfig,
        None,
        [
            *common,
            f"model.path={base_model}",
            f"run.output_dir={out / 'sft'}",
            f"run.steps={sft_steps}",
            f"run.batch_size={sft_batch_size}",
            "optim.lr=3e-3",
        ],
    )
    sft = SFTTrainer(sft_cfg, task=task)
    sft_loss = tuple(m["loss"] for m in sft.train())
    sft_model = sft.export(out / "sft-model")
    after_sft = evaluate_task(sft.vlm, task, test, max_new_tokens)
    say(f"GRPO: {rl_steps} steps with the {task_name} reward")
    rl_cfg = load_config(
        RLConfig,
        None,
        [
            *common,
            f"model.path={sft_model}",
            f"run.output_dir={out / 'rl'}",
            f"run.steps={rl_steps}",
            "run.batch_size=4",
            "run.micro_batch_size=16",
            "rollout.group_size=4",
            "rollout.top_k=50",
            f"rollout.max_new_tokens={max_new_tokens}",
            f"rollout.max_response_tokens={max_new_tokens}",
            f"optim.lr={rl_lr}",
            "algo.kl=loss",
            "algo.kl_coef=0.04",
            f"rollout.temperature={temperature}",
        ],
    )
    trainer = RLTrainer(rl_cfg, task=task)
    rl_reward = tuple(m.get("reward/mean", float("nan")) for m in trainer.train())
    after_rl = evaluate_task(trainer.vlm, task, test, max_new_tokens)
    return LearningResult(before, after_sft, after_rl, sft_loss, rl_reward, out / "rl", tuple(test))
