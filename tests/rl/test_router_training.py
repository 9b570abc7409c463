"""EVisRAG's released RS-GRPO in a training step: per-channel advantages (``router``) and the
per-scope loss (``aggregate_scoped``), against values computed by hand on a two-episode batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evidra.core.config import load_config
from evidra.core.errors import ConfigError
from evidra.core.types import Span
from evidra.methods import build_task, check_config, rl_trainer
from evidra.models.generation import Generation
from evidra.rewards.reward import RewardResult
from evidra.rl.run_config import RLConfig
from evidra.rl.tasks import TASKS, Task

ROOT = Path(__file__).resolve().parents[2]

# Two completions of one prompt: "A" is 4 tokens (head 1, tail 3), "B" is 3 tokens (head 2, tail 1).
HEAD = {"A": 1, "B": 2}
IDS = {"A": (101, 102, 103, 104), "B": (105, 106, 107)}  # plain text tokens of the tiny vocabulary
REWARD = {"A": 1.0, "B": 0.0}  # both channels: A right, B wrong


class _FixedBackend:
    """Writes "A" for the first episode of each group and "B" for the second."""

    def __init__(self, vlm: Any) -> None:
        self.vlm = vlm

    @property
    def processor(self) -> Any:
        return self.vlm.processor

    def generate(self, contexts: Any, params: Any) -> list[Generation]:
        texts = ["A" if i % 2 == 0 else "B" for i in range(len(contexts))]
        return [
            Generation(c.token_ids, IDS[t], (0.0,) * len(IDS[t]), t, "eos")
            for c, t in zip(contexts, texts, strict=True)
        ]

    def sync(self, model: Any) -> None:
        pass

    def release(self) -> None:
        pass


def _task() -> str:
    name = "test.two_scopes"
    if name in TASKS:
        return name
    base = TASKS.get("toy.length")

    def scopes(traj: Any, _tok: Any) -> dict[str, tuple[Span, ...]]:
        head = HEAD[traj.texts[-1]]
        return {"head": (Span(0, head),), "tail": (Span(head, len(traj.token_ids)),)}

    def reward(parsed: Any, sample: Any, traj: Any = None) -> RewardResult:
        r = REWARD[parsed.text]
        return RewardResult(total=2 * r, scopes={"head": r, "tail": r})

    TASKS.add(
        name, Task(name, base.samples, base.make_env, base.parse, reward, None, ("head", "tail"), scopes)
    )
    return name


def _step(tmp: Path, advantage: str) -> dict[str, float]:
    over = [
        "model.path=tiny:qwen2_5_vl",
        f"run.output_dir={tmp}",
        "run.steps=1",
        "run.batch_size=1",
        "run.micro_batch_size=1",
        "rollout.group_size=2",
        "data.size=2",
        f"data.task={_task()}",
        f"algo.advantage={advantage}",
        "algo.kl=none",
        "algo.dual_clip=null",
    ]
    trainer = rl_trainer(load_config(RLConfig, None, over))
    trainer.backend = _FixedBackend(trainer.vlm)
    (metrics,) = trainer.train()
    return metrics


def test_router_step_gives_the_hand_computed_per_scope_loss(tmp_path: Path) -> None:
    """One optimizer step on the batch: the ratio is exactly 1, so a token's loss is -A.

    Each channel's rewards in the group are (1, 0): A = +-0.5 / (std([1, 0]) + 1e-6) = +-a.
    head scope: A's 1 token at +a, B's 2 tokens at -a: (-a + 2a) / 3 = a / 3
    tail scope: A's 3 tokens at +a, B's 1 token at -a: (-3a + a) / 4 = -a / 2
    two scopes with a non-zero advantage: (a / 3 - a / 2) / 2 = -a / 12
    (over two micro-batches of one episode each, with the batch's per-scope token counts).
    """
    a = 0.5 / (0.5**0.5 + 1e-6)
    metrics = _step(tmp_path, "router")
    assert metrics["loss"] == pytest.approx(-a / 12, rel=1e-5)
    assert metrics["grad_norm"] > 0


def test_paper_rs_grpo_on_the_same_batch_is_one_token_mean(tmp_path: Path) -> None:
    """Eq. 8-10 instead: each token's mean reward normalised in the group, one token mean over the
    7 tokens: (1 * -a + 2 * a + 3 * -a + 1 * a) / 7 = -a / 7, not the router's -a / 12."""
    a = 0.5 / (0.5**0.5 + 1e-6)
    metrics = _step(tmp_path, "rs_grpo")
    assert metrics["loss"] == pytest.approx(-a / 7, rel=1e-5)


@pytest.mark.slow
def test_evisrag_upstream_recipe_trains_with_router_advantages_and_scoped_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """configs/tiny/evisrag_upstream.yaml: the released reward's six channels, normalised one by
    one (``router_advantages``) and combined per scope (``aggregate_scoped``)."""
    import evidra.rl.algo.estimators as estimators
    import evidra.rl.update as update

    calls: dict[str, list[Any]] = {"router": [], "scoped": []}

    def spy(name: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            calls[name].append(args[0].shape)
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(estimators, "router_advantages", spy("router", estimators.router_advantages))
    monkeypatch.setattr(update, "aggregate_scoped", spy("scoped", update.aggregate_scoped))
    over = [
        "run.steps=1",
        "run.batch_size=1",
        "rollout.group_size=2",
        "rollout.max_new_tokens=8",
        "algo.dynamic_sampling=false",
        "algo.mini_batch_size=0",
        "data.size=2",
        f"data.path={tmp_path / 'synth'}",
        f"run.output_dir={tmp_path / 'run'}",
        "model.cold_start.steps=0",
    ]
    cfg = load_config(RLConfig, ROOT / "configs" / "tiny" / "evisrag_upstream.yaml", over)
    (row,) = rl_trainer(cfg).train()
    assert calls["router"] == [(2, 6)]  # one call: 2 episodes x the six released components
    assert len(calls["scoped"]) == 1 and calls["scoped"][0][1] == 6  # (b, 6, R) per-scope losses
    assert {
        f"reward/{c}" for c in ("accuracy", "evidence", "format", "overlong", "isObserve", "isThink")
    } <= set(row)


def test_reward_mode_selects_the_released_evisrag_reward() -> None:

    paper = build_task(dict(name="evisrag"))
    upstream = build_task(dict(name="evisrag", reward_mode="upstream"))
    assert paper.scope_names == ("observe", "evidence", "think", "answer")
    assert upstream.scope_names == ("accuracy", "evidence", "format", "overlong", "isObserve", "isThink")
    assert build_task(dict(name="evisrag", weights={"format": 0.0})).reward != paper.reward


def test_reward_mode_and_router_are_checked_before_loading(tmp_path: Path) -> None:
    def cfg(*over: str) -> RLConfig:
        return load_config(RLConfig, None, ["model.path=x", f"run.output_dir={tmp_path}", *over])

    with pytest.raises(ConfigError, match=r"'reward\.mode' was replaced; did you mean 'method\.reward_mode'"):
        check_config(cfg("data.task=toy.digits", "reward.mode=upstream"))
    with pytest.raises(ConfigError, match="router needs a task with scoped rewards"):
        check_config(cfg("data.task=toy.digits", "algo.advantage=router"))
    with pytest.raises(ConfigError, match=r"algo\.loss_agg=token-mean"):
        check_config(cfg("method.name=evisrag", "algo.advantage=router", "algo.loss_agg=seq-mean-token-mean"))
    with pytest.raises(ConfigError, match=r"method\.reward_mode must be one of"):
        check_config(cfg("method.name=evisrag", "method.reward_mode=released"))
