"""The RL trainer: rollouts, rewards, group advantages, clipped policy updates. Thin on purpose.

One step: take ``batch_size`` prompts, run ``group_size`` episodes each (``rl.rollout``), score
them with the task's reward, turn rewards into advantages (``rl.advantages``), then update the
policy on the exact sampled tokens with the clipped objective (``rl.losses``) and the KL term
(``rl.kl``), over micro-batches whose loss uses whole-batch normalisers, so gradient
accumulation equals the full batch. Runs under ``accelerate launch`` on several processes.

    evidra train rl --config configs/tiny/lat.yaml run.steps=20
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from evidra.core.config import to_dict
from evidra.core.devices import peak_memory_gb
from evidra.core.errors import TrainingError
from evidra.core.types import Sample
from evidra.models.vision_cache import VisionFeatureCache
from evidra.rewards.guards import guarded
from evidra.rewards.reward import RewardResult
from evidra.rl.algo.advantages import ScopedAdvantages
from evidra.rl.algo.credit import loss_rows, over_turn, token_advantages
from evidra.rl.algo.estimators import ADVANTAGES
from evidra.rl.algo.filtering import DynamicSampler, NoVarianceWatch, Round, group_filter, sampling_rewards
from evidra.rl.algo.kl import kl_in_reward
from evidra.rl.common import DataCursor, make_optimizer
from evidra.rl.episode_scoring import score_episodes
from evidra.rl.generation_backends import make_backend
from evidra.rl.parallel.precision import default_device, resolve_model_dtype, training_precision
from evidra.rl.parallel.processes import Engine, pad_microbatches
from evidra.rl.policy import Reference, load_policy
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.checkpoint import TrainState, resume_newest, save_and_prune
from evidra.rl.runs.folder import RunFolder
from evidra.rl.sft.cold_start import with_cold_start, world_size
from evidra.rl.tasks import Task, config_task, task_samples
from evidra.rl.update import (
    MicroBatch,
    UpdateSettings,
    empty_like,
    episode_tensors,
    mismatch_stats,
    policy_update,
    recompute_old_logprobs,
    reference_logprobs,
)
from evidra.rl.validate import local_batch_size, validate_rl_config
from evidra.rollout import Episode, rollout
from evidra.safeio.sink import MetricsSink

if TYPE_CHECKING:
    from accelerate import Accelerator
    from torch import Tensor

logger = logging.getLogger(__name__)

Group = tuple[list[Episode], list[RewardResult]]


class RLTrainer:
    """GRPO-family training of a Qwen-VL policy on one task: ``task`` (a paper method's, built by
    ``evidra.methods``: ``evidra.methods.rl_trainer(cfg)``) or the plain task ``data.task`` names;
    a config naming a method without its task is an error."""

    def __init__(
        self, cfg: RLConfig, accelerator: Accelerator | None = None, task: Task | None = None
    ) -> None:
        from accelerate.utils import set_seed

        task = task if task is not None else config_task(cfg.method, cfg.data, "rl_trainer")
        validate_rl_config(cfg, task)  # every name and option, before anything heavy loads
        processes = accelerator.num_processes if accelerator is not None else world_size()
        # model.cold_start: RL starts from the base model's SFT on the task's oracle (built once, cached)
        cfg, self.cold_start = with_cold_start(cfg, task, processes)
        device = accelerator.device if accelerator is not None else default_device()
        cfg = replace(cfg, model=resolve_model_dtype(cfg.model, device))  # dtype: auto -> this hardware's
        self.cfg = cfg
        self.folder = RunFolder.open(cfg, "rl")  # another run's base, method or config: before any load
        self.precision = training_precision(cfg.model)
        self.engine = Engine(cfg.run, self.precision, accelerator)
        self.acc = self.engine.acc
        self.local_batch = local_batch_size(cfg, self.acc.num_processes)
        self.out = Path(cfg.run.output_dir)
        set_seed(cfg.run.seed)  # same on every rank: identical LoRA initialisation
        self.task = task
        with self.acc.main_process_first():  # files (inline benchmark images, a tiny model) written once
            self.samples = task_samples(self.task, cfg.data)
            base = self.folder.base_folder(self.out / "models")  # its fingerprint checked
            self.vlm = load_policy(
                replace(cfg.model, path=str(base)),
                self.out / "models",
                device=str(self.acc.device),
                cast_frozen=self.engine.sharding == "none",
            )
        lora = cfg.model.lora.enabled
        self.reference = Reference.build(self.vlm, lora, self.precision) if cfg.algo.kl != "none" else None
        if self.reference is not None and not lora:
            self.engine.prepare_frozen(self.reference.model)
        self.cursor = DataCursor(self.samples, cfg.data.seed)
        self.model, self.optimizer, self.scheduler = self.engine.prepare(
            self.vlm.model,
            partial(make_optimizer, cfg=cfg.optim, total_steps=cfg.run.steps),
            cfg.optim.max_grad_norm,
        )
        self.folder.check_shapes(self.engine.unwrap(self.model))  # before any checkpoint loads or log opens
        ref_model = [self.reference.model] if self.reference is not None and not self.reference.lora else []
        self.vision_cache = VisionFeatureCache([self.vlm.model, *ref_model])
        self.sink = MetricsSink(
            self.out,
            report_to=cfg.run.report_to,
            wandb_project=cfg.run.wandb_project,
            config=to_dict(cfg),
            enabled=self.acc.is_main_process,
        )
        self.state = TrainState(step=0, data_epoch=0, data_offset=0)
        self.flat_watch = NoVarianceWatch(cfg.algo.warn_no_variance_after)
        self._maybe_resume()
        # rollout backend (rollout.backend): built after resuming, so vLLM starts from these weights
        self.backend = make_backend(cfg.rollout, self.vlm, cfg.model.dtype)
        if self.state.step:
            self.backend.sync(self.vlm.model)
        if self.acc.is_main_process:
            self.folder.write()  # a fresh run's config.yaml and run.json; a resumed run's stay

    def next_samples(self) -> list[Sample]:
        """This rank's prompts for the next step; the position is saved in checkpoints."""
        samples, self.state = self.cursor.take(
            self.state, self.local_batch, self.acc.process_index, self.acc.num_processes
        )
        return samples

    # rollouts -----------------------------------------------------------------------------
    def _rollout(self, samples: list[Sample]) -> list[Group]:
        r = self.cfg.rollout
        params, limits = r.sampling(), r.limits()
        self.vlm.model.eval()
        with self.engine.generation(self.model):
            episodes = rollout(self.backend, self.task.make_env, samples, r.group_size, params, limits)
        if self.task.scopes is not None:  # token spans of each reward channel (RS-GRPO)
            annotate, tok = self.task.scopes, self.vlm.tokenizer
            episodes = [
                replace(ep, trajectory=replace(ep.trajectory, scopes=annotate(ep.trajectory, tok)))
                for ep in episodes
            ]
        results, final = score_episodes(self.task, self.vlm, episodes, guards=self.cfg.reward.guards)
        if self.cfg.reward.guards:  # beyond the papers: a gamed reward is capped at 0
            cfg = self.cfg.reward
            pairs = zip(results, final, episodes, strict=True)
            results = [guarded(res, p, ep.sample, cfg) for res, p, ep in pairs]
        g = r.group_size
        return [(episodes[i : i + g], results[i : i + g]) for i in range(0, len(episodes), g)]

    def _collect(self) -> tuple[list[Group], list[Group], dict[str, float]]:
        """The groups to train on, every group sampled for them (dynamic sampling may draw
        several rounds and drop groups), and the sampling counts."""
        if not self.cfg.algo.dynamic_sampling:
            groups = self._rollout(self.next_samples())
            return groups, groups, {}
        sampled: list[Group] = []

        def generate(_round: int) -> Round[Group]:
            groups = self._rollout(self.next_samples())
            sampled.extend(groups)
            rewards = sampling_rewards([results for _, results in groups], self.task.scope_names, per_scope)
            return Round(groups, rewards)  # rewards (P, G), or (P, G, K) channels

        a = self.cfg.algo
        # RS-GRPO normalises each channel in its group: DAPO keeps a group when any channel varies
        per_scope = ADVANTAGES.get(a.advantage).needs_scopes and not a.keep_mean_range
        keep = group_filter(a.keep_mean_range)
        sampler: DynamicSampler[Group] = DynamicSampler(
            self.local_batch, keep, max_rounds=a.max_sampling_rounds, on_short="partial"
        )
        result = sampler.collect(generate)
        totals = [r.total for _, results in sampled for r in results if math.isfinite(r.total)]
        stats = {
            "sampling/rounds": float(result.rounds),
            "sampling/groups": float(result.generated),
            "sampling/filtered_groups": float(result.filtered),
            # what the policy earns before the filter (reward/* reads the kept groups only)
            "sampling/reward_mean": sum(totals) / len(totals) if totals else math.nan,
        }
        return result.groups, sampled, stats

    def _watch_variance(self, sampled: list[Group]) -> None:
        """One warning, once ``algo.warn_no_variance_after`` steps in a row gave each sampled group a
        single reward: every advantage, the loss and the KL stay 0 and nothing learns."""
        if not self.flat_watch.observe(_group_rewards(sampled)) or not self.acc.is_main_process:
            return
        logger.warning(
            "no reward variance: nothing to learn from; start from an SFT checkpoint? (for %d steps in a "
            "row each group of %d episodes earned a single reward, e.g. %s: its group-relative "
            "advantages are 0)",
            self.flat_watch.streak,
            self.cfg.rollout.group_size,
            _first_reward(sampled),
        )

    # one step -----------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        from accelerate.utils import set_seed

        # Sampling randomness is a function of (seed, step, rank): a resumed run draws exactly
        # what the uninterrupted run drew, and every rank samples differently.
        set_seed(self.cfg.run.seed + 7919 * (self.state.step + 1) + 1_000_003 * self.acc.process_index)
        with self.vision_cache.active():  # a frozen vision tower encodes each image once per step
            return self._step()

    def _step(self) -> dict[str, float]:
        import torch

        start = time.perf_counter()
        peak_memory_gb(self.engine.device)  # the step's peaks count from here
        groups, sampled, stats = self._collect()
        self._watch_variance(sampled)
        n_mini = self._minibatch_count(len(groups))
        if n_mini == 0:
            return self._skip(sampled, stats)
        episodes = [ep for eps, _ in groups for ep in eps]
        results = [res for _, rs in groups for res in rs]
        rollout_s = time.perf_counter() - start
        memory = {"memory/rollout_peak_gb": peak_memory_gb(self.engine.device)}
        self.backend.release()  # vLLM on a GPU: free its memory for the update
        minibatches = self._minibatches(groups, n_mini)
        flat = [mb for mini in minibatches for mb in mini]
        temperature = self.cfg.rollout.temperature
        ref = reference_logprobs(self.reference, flat, temperature, self.engine) if self.reference else None
        rewards = torch.tensor([r.total if math.isfinite(r.total) else 0.0 for r in results])  # (B*G,)
        valid = torch.tensor([r.scored and math.isfinite(r.total) for r in results])  # (B*G,)
        shaped = self._kl_in_reward(rewards, flat, ref)
        g, scopes = self.cfg.rollout.group_size, self.task.scope_names
        # (B*G, L), or ScopedAdvantages (B*G, K, L) for a loss taken per scope (algo.advantage=router)
        advantages = token_advantages(self.cfg.algo, episodes, results, shaped, valid, g, scopes)
        for mb in flat:
            mb.set_advantages(advantages)
        settings = self._settings()
        if self._recompute_old(len(minibatches)):
            recompute_old_logprobs(self.model, minibatches, temperature, self.engine)
            stats.update(mismatch_stats(minibatches))
        self.model.train()
        kl_ref = ref if self.cfg.algo.kl == "loss" else None
        rows = loss_rows(valid, over_turn(episodes), mask_cut=self.cfg.algo.mask_truncated)  # (B*G,)
        update = policy_update(self.model, self.optimizer, self.engine, minibatches, rows, kl_ref, settings)
        if self.cfg.algo.mask_truncated:  # Mini-o3's over-turn masking: how many episodes it kept out
            update["episode/over_turn_masked"] = float((valid & ~rows).sum())
        self._advance_schedule()
        self.backend.sync(self.engine.unwrap(self.model))  # the rollout engine takes the new weights
        self.state = TrainState(self.state.step + 1, self.state.data_epoch, self.state.data_offset)
        memory["memory/update_peak_gb"] = peak_memory_gb(self.engine.device)
        return {
            **{k: v for k, v in memory.items() if v is not None},  # on a GPU: where the memory goes
            **_reward_metrics(results),
            **_advantage_metrics(advantages),
            **_episode_metrics(episodes),
            **update,
            **stats,
            "lr": float(self.scheduler.get_last_lr()[0]),
            "time/rollout_s": rollout_s,
            "time/step_s": time.perf_counter() - start,
            "throughput/policy_tokens_per_s": sum(e.trajectory.num_policy_tokens for e in episodes)
            / max(1e-9, time.perf_counter() - start),
        }

    def _skip(self, sampled: list[Group], stats: dict[str, float]) -> dict[str, float]:
        """A step whose groups were all filtered out: no update, but what was sampled is logged (the
        rewards per component, the episodes, how many groups were drawn and dropped)."""
        logger.warning(
            "step %d: all %d sampled groups were filtered out; skipping the update",
            self.state.step,
            len(sampled),
        )
        self.state = TrainState(self.state.step + 1, self.state.data_epoch, self.state.data_offset)
        self._advance_schedule()
        results = [res for _, rs in sampled for res in rs]
        episodes = [ep for eps, _ in sampled for ep in eps]
        return {"skipped": 1.0, **_reward_metrics(results), **_episode_metrics(episodes), **stats}

    def _advance_schedule(self) -> None:
        """One step of the learning-rate schedule, which follows steps whether or not the optimizer
        stepped (a step whose update was skipped, non-finite or all filtered, still counts); torch's
        warning about a scheduler stepping before its optimizer says nothing here."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step", UserWarning)
            self.scheduler.step()

    def _minibatch_count(self, local_groups: int) -> int:
        """Optimizer steps per pass: ``batch_size / mini_batch_size``, fewer if some process holds
        fewer groups (dynamic sampling); the same on every process (their collectives must pair)."""

        a, run = self.cfg.algo, self.cfg.run
        nominal = run.batch_size // a.mini_batch_size if a.mini_batch_size else 1
        return self.engine.all_min(min(nominal, local_groups))

    def _minibatches(self, groups: list[Group], n_mini: int) -> list[list[MicroBatch]]:
        """Whole groups split into ``n_mini`` near-equal mini-batches, each into micro-batches
        (sharded: as many on every process, padded with empty ones)."""
        out, offset = [], 0
        g = self.cfg.rollout.group_size
        for part in _split(groups, n_mini):
            episodes = [ep for eps, _ in part for ep in eps]
            micro = episode_tensors(self.vlm, episodes, self.cfg.run.micro_batch_size, offset)
            if self.engine.sharding != "none":
                micro = pad_microbatches(micro, self.engine.all_max(len(micro)), empty_like)
            out.append(micro)
            offset += len(part) * g
        return out

    def _recompute_old(self, n_mini: int) -> bool:
        """Whether the trainer recomputes the old log-probs (see ``AlgoConfig.old_logprobs``)."""
        mode = self.cfg.algo.old_logprobs
        if mode != "auto":
            return mode == "recompute"
        if self.cfg.rollout.backend != "hf":  # another engine's log-probs: measure the mismatch
            return True
        return n_mini * self.cfg.algo.ppo_epochs > 1  # one step per batch: the current log-probs are old

    def _kl_in_reward(self, rewards: Tensor, tensors: list[MicroBatch], ref: list[Tensor] | None) -> Tensor:
        if self.cfg.algo.kl != "reward" or ref is None:
            return rewards
        import torch

        parts = [
            kl_in_reward(
                rewards[t.rows],
                t.sampler_logprobs,
                r,
                t.loss_mask,
                beta=self.cfg.algo.kl_coef,
                estimator=self.cfg.algo.kl_estimator,
                per="sequence",
            )
            for t, r in zip(tensors, ref, strict=True)
            if not t.padding
        ]
        return torch.cat(parts)

    def _settings(self) -> UpdateSettings:
        a = self.cfg.algo
        return UpdateSettings(
            policy_loss=a.policy_loss,
            loss_agg=a.loss_agg,
            clip_low=a.clip_low,
            clip_high=a.clip_high,
            dual_clip=a.dual_clip,
            kl_coef=a.kl_coef,
            kl_estimator=a.kl_estimator,
            ppo_epochs=a.ppo_epochs,
            max_grad_norm=self.cfg.optim.max_grad_norm,
            temperature=self.cfg.rollout.temperature,
            max_len=self.cfg.rollout.max_response_tokens,
            old_logprobs=a.old_logprobs,
            tis_cap=a.tis_cap,
        )

    # loop and checkpoints -----------------------------------------------------------------
    def train(self, on_step: Callable[[int, dict[str, float]], None] | None = None) -> list[dict[str, float]]:
        history, bad = [], 0
        while self.state.step < self.cfg.run.steps:
            metrics = self.step()
            history.append(metrics)
            bad = bad + 1 if metrics.get("update/nonfinite_skips") else 0
            if bad >= max(1, self.cfg.run.max_bad_steps):
                raise TrainingError(
                    f"{bad} steps in a row had a non-finite loss or gradient (step {self.state.step}); lower "
                    "optim.lr or check the data; the newest checkpoint is unaffected"
                )
            self.sink.write(self.state.step, metrics)
            if on_step is not None:
                on_step(self.state.step, metrics)
            every = self.cfg.run.save_every
            if (every and self.state.step % every == 0) or self.state.step == self.cfg.run.steps:
                self.save()
        self.sink.close()
        return history

    def save(self) -> Path:
        model = self.engine.unwrap(self.model)
        opt, sched = self.optimizer, self.scheduler
        return save_and_prune(self.out, self.state, model, opt, sched, self.cfg, self.engine)

    def _maybe_resume(self) -> None:
        model = self.engine.unwrap(self.model)
        opt, sched, resume = self.optimizer, self.scheduler, self.cfg.run.resume
        state = resume_newest(self.out, model, opt, sched, self.engine) if resume else None
        self.state = state or TrainState(0, 0, 0)
        self.sink.truncate_after(self.state.step)  # a killed attempt's lines past the checkpoint go


def _split(items: list[Group], n: int) -> list[list[Group]]:
    """``items`` in ``n`` consecutive near-equal parts (the first ones one longer).

    >>> [len(p) for p in _split(list(range(7)), 3)]  # type: ignore[arg-type]
    [3, 2, 2]
    """
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def _group_rewards(groups: list[Group]) -> Tensor:
    """The groups' rewards (P, G); NaN where an episode earned none (unscored or non-finite)."""
    import torch

    rows = [[r.total if r.scored and math.isfinite(r.total) else math.nan for r in rs] for _, rs in groups]
    return torch.tensor(rows, dtype=torch.float64).reshape(len(groups), len(rows[0]) if rows else 1)  # (P, G)


def _first_reward(groups: list[Group]) -> str:
    """The first finite reward of ``groups``, as a warning shows it."""
    finite = (r.total for _, rs in groups for r in rs if r.scored and math.isfinite(r.total))
    return f"{next(finite, math.nan):g}"


def _reward_metrics(results: list[RewardResult]) -> dict[str, float]:
    """Reward statistics over the scored episodes only (unscored ones are counted apart)."""
    import torch

    scored = torch.tensor([r.total for r in results if r.scored and math.isfinite(r.total)])  # (N,)
    out = {
        "reward/mean": float(scored.mean()) if scored.numel() else float("nan"),
        "reward/std": float(scored.std()) if scored.numel() > 1 else 0.0,
        "unscored": float(sum(not r.scored for r in results)),
        "reward/nonfinite": float(sum(r.scored and not math.isfinite(r.total) for r in results)),
    }
    kept = [r for r in results if r.scored]
    for key in sorted({k for r in kept for k in r.components}):
        out[f"reward/{key}"] = sum(r.components.get(key, 0.0) for r in kept) / len(kept)
    for key in sorted({k for r in results if not r.scored for k in r.components}):  # unscored:<reason>
        out[f"reward/{key}"] = float(sum(r.components.get(key, 0.0) for r in results if not r.scored))
    return out


def _advantage_metrics(advantages: Tensor | ScopedAdvantages) -> dict[str, float]:
    """How large the advantages are, and how many are 0 (no learning signal)."""
    if isinstance(advantages, ScopedAdvantages):  # per scope: the advantages on the scopes' tokens
        advantages = advantages.values[advantages.masks > 0]
    nonzero = advantages[advantages != 0]
    return {
        "advantage/abs_mean": float(nonzero.abs().mean()) if nonzero.numel() else 0.0,
        "advantage/zero_frac": 1.0 - nonzero.numel() / max(1, advantages.numel()),
    }


def _episode_metrics(episodes: list[Episode]) -> dict[str, float]:
    """Lengths, turns, truncation, and per-episode counts of each environment action."""
    n = len(episodes)
    actions: dict[str, int] = {}
    for ep in episodes:
        for info in ep.infos:
            name = info.action
            actions[name] = actions.get(name, 0) + 1
    first = sum(bool(ep.infos) and ep.infos[0].action == "search" for ep in episodes)
    return {
        **{f"actions/{k}": v / n for k, v in sorted(actions.items())},
        "actions/first_is_search": first / n,
        "episode/policy_tokens": sum(e.trajectory.num_policy_tokens for e in episodes) / n,
        "episode/tokens": sum(len(e.trajectory.token_ids) for e in episodes) / n,
        "episode/turns": sum(e.trajectory.num_turns for e in episodes) / n,
        "episode/truncated": sum(e.trajectory.truncated for e in episodes) / n,
    }
