from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import torch

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.rl.algo.credit import token_advantages
from evidra.rl.run_config import RLConfig
from evidra.rl.runs.checkpoint import list_checkpoints
from evidra.rl.trainer import RLTrainer


def _cfg(out: Path, *extra: str) -> RLConfig:
    base = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={out}",
        "run.batch_size=2",
        "run.micro_batch_size=3",
        "rollout.group_size=3",
        "rollout.max_new_tokens=6",
        "optim.lr=1e-3",
        "data.size=8",
    ]
    return load_config(RLConfig, None, [*base, *extra])


def test_resume_reproduces_the_uninterrupted_run(tmp_path: Path) -> None:
    full = RLTrainer(_cfg(tmp_path / "full", "run.steps=4", "run.save_every=2")).train()
    first = RLTrainer(_cfg(tmp_path / "cut", "run.steps=2", "run.save_every=2")).train()
    # a half-written checkpoint (a crash mid-save) must be ignored on resume
    (tmp_path / "cut" / "checkpoints" / ".tmp-step-000003").mkdir()
    resumed = RLTrainer(_cfg(tmp_path / "cut", "run.steps=4", "run.save_every=2"))
    assert resumed.state.step == 2 and resumed.state.data_offset == 4
    rest = resumed.train()
    for got, want in zip(first + rest, full, strict=True):
        assert got["loss"] == pytest.approx(want["loss"], abs=1e-6)
        assert got["reward/mean"] == pytest.approx(want["reward/mean"], abs=1e-9)
        assert got["episode/tokens"] == want["episode/tokens"]
    assert [p.name for p in list_checkpoints(tmp_path / "cut")] == ["step-000002", "step-000004"]
    metrics = (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()
    assert len(metrics) == 4 and (tmp_path / "cut" / "config.yaml").is_file()


def _loaded_params(trainer: RLTrainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}


def test_micro_batching_equals_full_batch(tmp_path: Path) -> None:
    """Gradient accumulation with whole-batch normalisers gives the full-batch update."""
    from evidra.rl.update import episode_tensors, policy_update

    trainer = RLTrainer(_cfg(tmp_path, "run.steps=1", "model.lora.enabled=false", "algo.kl=none"))
    groups = trainer._rollout(trainer.next_samples())
    episodes = [ep for eps, _ in groups for ep in eps]
    rewards = torch.tensor([r.total for _, rs in groups for r in rs]) + torch.arange(len(episodes)) * 0.1
    valid = torch.ones(len(episodes), dtype=torch.bool)
    results = [r for _, rs in groups for r in rs]
    advantages = token_advantages(trainer.cfg.algo, episodes, results, rewards, valid, 3)  # (N, L)
    start_state = copy.deepcopy(trainer.vlm.model.state_dict())
    # plain SGD (lr 1): the weight change is the clipped gradient itself. Adam's first step is
    # ~lr*sign(g) and flips on float-noise-sized gradients, which would hide what we compare.
    sgd = torch.optim.SGD([p for p in trainer.model.parameters() if p.requires_grad], lr=1.0)
    outcomes = []
    for micro in (len(episodes), 2):
        trainer.vlm.model.load_state_dict(start_state)
        batches = episode_tensors(trainer.vlm, episodes, micro)
        for mb in batches:
            mb.set_advantages(advantages)
        stats = policy_update(trainer.model, sgd, trainer.engine, batches, valid, None, trainer._settings())
        outcomes.append((stats, _loaded_params(trainer)))
    (full_stats, full), (micro_stats, micro) = outcomes
    # Different micro-batch shapes change padding and the shared-prompt grouping, hence float
    # summation order: measured differences are ~1e-5, far below any real normalisation error
    # (a wrong normaliser changes the loss by a factor, e.g. 3x here).
    assert full_stats["loss"] == pytest.approx(micro_stats["loss"], abs=1e-4)
    assert full_stats["grad_norm"] == pytest.approx(micro_stats["grad_norm"], rel=1e-3)
    changed = [n for n in full if not torch.equal(full[n], start_state[n])]
    assert changed
    for name in full:
        d_full, d_micro = full[name] - start_state[name], micro[name] - start_state[name]
        err = float((d_full - d_micro).abs().max() / d_full.abs().max().clamp(min=1e-12))
        assert err < 1e-3, name


def test_bf16_full_fine_tuning_with_gradient_checkpointing_trains(tmp_path: Path) -> None:
    """Checkpointed layers drop KV caches, so the shared-prompt path must step aside; a frozen
    vision tower is cached (fingerprinted) under bf16 autocast."""
    cfg = _cfg(
        tmp_path,
        "run.steps=1",
        "model.lora.enabled=false",
        "model.dtype=bfloat16",
        "model.gradient_checkpointing=true",
        "algo.kl=loss",
        "algo.kl_coef=0.04",
    )
    trainer = RLTrainer(cfg)
    assert trainer.vlm.model.is_gradient_checkpointing
    before = _loaded_params(trainer)
    (metrics,) = trainer.train()
    assert metrics["loss"] == metrics["loss"] and metrics["grad_norm"] > 0  # finite, and it learned
    after = _loaded_params(trainer)
    assert any(not torch.equal(before[n], after[n]) for n in before)
    assert all(p.dtype == torch.float32 for p in after.values())  # fp32 masters


def test_lora_reference_is_the_base_model(tmp_path: Path, tiny_vlms: dict[str, Any]) -> None:
    from evidra.rl.update import episode_tensors, reference_logprobs

    trainer = RLTrainer(_cfg(tmp_path, "run.steps=2", "optim.lr=5e-2"))
    trainer.train()
    groups = trainer._rollout(trainer.next_samples())
    episodes = [ep for eps, _ in groups for ep in eps]
    batches = episode_tensors(trainer.vlm, episodes, 16)
    assert trainer.reference is not None and trainer.reference.lora
    (ref,) = reference_logprobs(trainer.reference, batches, 1.0)
    from evidra.models.loading import load_vlm

    base = load_vlm(tmp_path / "models" / "tiny-qwen2_5_vl")
    with torch.no_grad():
        want = batches[0].logprobs(base.model, 1.0)
        policy = batches[0].logprobs(trainer.vlm.model, 1.0)
    mask = batches[0].loss_mask.bool()
    assert torch.allclose(ref[mask], want[mask], atol=1e-5)
    assert not torch.allclose(policy[mask], want[mask], atol=1e-3), "the adapter should have moved the policy"


def test_unscored_samples_are_excluded(tmp_path: Path) -> None:
    trainer = RLTrainer(_cfg(tmp_path, "run.steps=1", "algo.kl=none"))
    groups = trainer._rollout(trainer.next_samples())
    episodes = [ep for eps, _ in groups for ep in eps]
    results = [r for _, rs in groups for r in rs]
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.2, 0.9, 0.1])
    valid = torch.tensor([True, True, False, True, True, True])
    adv = token_advantages(trainer.cfg.algo, episodes, results, rewards, valid, 3)[:, 0]  # (6,)
    assert adv[2] == 0.0
    assert adv[:2].sum() == pytest.approx(0.0, abs=1e-6)  # group 0 normalised over its valid rows only
    assert adv[0] == pytest.approx(0.5 / (2**-0.5 + 1e-6), rel=1e-6)  # (1 - 0.5) / std([1, 0]), unbiased


def _register_scoped_task() -> str:
    """A toy task whose reward has two channels: one on the first half of the tokens, one on the rest."""
    from evidra.core.types import Span
    from evidra.rewards.reward import RewardResult
    from evidra.rl.tasks import TASKS, Task

    name = "test.scoped"
    if name in TASKS:
        return name
    base = TASKS.get("toy.length")

    def scopes(traj: Any, _tok: Any) -> dict[str, tuple[Span, ...]]:
        half = len(traj.token_ids) // 2
        return {"head": (Span(0, half),), "tail": (Span(half, len(traj.token_ids)),)}

    def reward(parsed: Any, sample: Any, traj: Any = None) -> RewardResult:
        head = float(sum(c.isdigit() for c in parsed.text[:10]))
        tail = len(parsed.text) / 100
        return RewardResult(total=head + tail, scopes={"head": head, "tail": tail}, turns=(head + tail,))

    TASKS.add(
        name, Task(name, base.samples, base.make_env, base.parse, reward, None, ("head", "tail"), scopes)
    )
    return name


@pytest.mark.parametrize("estimator", ["rs_grpo", "turn_credit", "dr_grpo"])
def test_scoped_and_turn_credit_advantages_train(tmp_path: Path, estimator: str) -> None:
    task = _register_scoped_task()
    trainer = RLTrainer(
        _cfg(
            tmp_path,
            "run.steps=1",
            f"data.task={task}",
            f"algo.advantage={estimator}",
            "algo.kl=none",
            "model.lora.enabled=false",
        )
    )
    (metrics,) = trainer.train()
    assert metrics["grad_norm"] > 0 and 0 <= metrics["advantage/zero_frac"] < 1
    assert metrics["entropy"] > 0 and metrics["throughput/policy_tokens_per_s"] > 0


def test_dynamic_sampling_drops_flat_groups(tmp_path: Path) -> None:
    # toy.digits: a random policy almost never writes a digit, so most groups are all-zero
    trainer = RLTrainer(
        _cfg(tmp_path, "run.steps=1", "algo.dynamic_sampling=true", "algo.max_sampling_rounds=2")
    )
    (metrics,) = trainer.train()
    assert metrics["sampling/rounds"] == 2  # not enough informative groups in round 1
    assert metrics["sampling/filtered_groups"] >= 1


@pytest.mark.parametrize(("band", "kept"), [("[-1.0,100.0]", True), ("[5.0,6.0]", False)])
def test_dynamic_sampling_by_mean_reward_range(tmp_path: Path, band: str, kept: bool) -> None:
    # toy.length rewards lie in [0, 1]: a wide band keeps every group, a band above 1 keeps none
    over = [
        "run.steps=1",
        "data.task=toy.length",
        "algo.dynamic_sampling=true",
        "algo.max_sampling_rounds=1",
        f"algo.keep_mean_range={band}",
    ]
    (metrics,) = RLTrainer(_cfg(tmp_path, *over)).train()
    assert metrics["sampling/filtered_groups"] == (0 if kept else 2)
    assert ("skipped" in metrics) != kept


class _SpamBackend:
    """Answers every prompt with a list of candidates that contains the gold value."""

    def __init__(self, vlm: Any) -> None:
        self.vlm = vlm

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Any, params: Any) -> list[Any]:
        from evidra.models.generation import Generation

        out = []
        for c in contexts:
            text = "<answer>" + ", ".join(str(v) for v in range(100)) + "</answer>"
            ids = tuple(self.vlm.tokenizer(text, add_special_tokens=False)["input_ids"])
            out.append(Generation(c.token_ids, ids, (0.0,) * len(ids), text, "eos"))
        return out

    def sync(self, model: Any) -> None:
        pass

    def release(self) -> None:
        pass


@pytest.mark.parametrize("guards", [False, True])
def test_reward_guards_cap_a_spammed_answer_in_training(tmp_path: Path, guards: bool) -> None:
    cfg = _cfg(
        tmp_path,
        "run.steps=1",
        "data.task=toy.key_value",
        "rollout.max_turns=1",
        f"reward.guards={str(guards).lower()}",
    )
    trainer = RLTrainer(cfg)
    trainer.backend = _SpamBackend(trainer.vlm)
    results = [r for _, rs in trainer._rollout(trainer.next_samples()) for r in rs]
    assert results and all(r.scored for r in results)
    if guards:
        assert all(r.total <= 0.0 and r.components["guard:many_candidates"] == 1.0 for r in results)
    else:
        assert all(not any(k.startswith("guard:") for k in r.components) for r in results)


def test_rollout_min_new_tokens_is_validated_before_loading(tmp_path: Path) -> None:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp_path}",
        "data.task=toy.length",
        "rollout.max_new_tokens=6",
        "rollout.min_new_tokens=7",
    ]
    with pytest.raises(ConfigError, match=r"rollout.min_new_tokens must be in \[0, max_new_tokens\], got 7"):
        RLTrainer(load_config(RLConfig, None, over))
    assert not (tmp_path / "models").exists()  # refused before the model was built


def _image_task(folder: Path) -> Any:
    """Two samples of one random 56x56 page each, rewarded for longer answers."""
    import numpy as np
    from PIL import Image

    from evidra.core.types import Page, Parsed, Sample
    from evidra.env import SingleTurnEnv
    from evidra.paradigms import Direct
    from evidra.rewards.reward import RewardResult
    from evidra.rl.tasks import Task

    samples = []
    for i in range(2):
        path = folder / f"page{i}.png"
        Image.fromarray(np.random.default_rng(i).integers(0, 255, (56, 56, 3), dtype=np.uint8)).save(path)
        samples.append(
            Sample(id=f"s{i}", question=f"What is on page {i}?", pages=(Page(f"p{i}", str(path), 56, 56),))
        )
    return Task(
        name="test.pages",
        samples=lambda cfg: samples,
        make_env=lambda sample: SingleTurnEnv(Direct()),
        parse=lambda text: Parsed(text=text),
        reward=lambda parsed, sample, traj=None: RewardResult(total=min(1.0, len(parsed.text) / 20)),
    )


@pytest.mark.parametrize("vision", ["frozen", "trained"])
def test_sampling_without_autograd_feeds_the_update(tmp_path: Path, vision: str) -> None:
    """An unsharded trainer samples and scores the reference under ``torch.inference_mode``; the
    pixels, features and reference log-probs it makes still serve the update under autograd,
    with the vision tower frozen (cached features) or trained (pixels through the tower)."""
    over = [
        "model.lora.enabled=false",
        f"model.freeze_vision={vision == 'frozen'}",
        "algo.kl=loss",
        "algo.kl_coef=0.1",
        "rollout.min_new_tokens=6",
    ]
    trainer = RLTrainer(_cfg(tmp_path / "run", *over), task=_image_task(tmp_path))
    assert isinstance(trainer.engine.no_autograd(), torch.inference_mode)
    before = {n: p.detach().clone() for n, p in trainer.vlm.model.named_parameters() if p.requires_grad}
    metrics = trainer.step()
    assert metrics["episode/policy_tokens"] == 6 and not metrics.get("update/nonfinite_skips")
    moved = {
        n for n, p in trainer.vlm.model.named_parameters() if n in before and not torch.equal(p, before[n])
    }
    assert any(".visual." in f".{n}" for n in moved) is (vision == "trained")
    assert any(".visual." not in f".{n}" for n in moved)
