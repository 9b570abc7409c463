"""Mini-o3's over-turn masking: cut episodes leave the loss, not the baseline."""

from __future__ import annotations

import torch

from evidra.core.types import Sample, Span, Trajectory
from evidra.env.environment import StepInfo
from evidra.models.context import Context
from evidra.rl.algo.advantages import grpo
from evidra.rl.algo.credit import loss_rows, over_turn
from evidra.rl.run_config import AlgoConfig
from evidra.rollout import Episode


def _episode(truncated: bool, turn_limit: bool) -> Episode:
    traj = Trajectory(
        (), (1,), (1,), (0.0,), (Span(0, 1),), ("t",), truncated=truncated, finished=not truncated
    )
    return Episode(
        Sample(id="s", question="q"), 0, traj, Context(()), (StepInfo("search", turn_limit=turn_limit),)
    )


def test_over_turn_reads_the_rollout_and_the_environment() -> None:
    eps = [_episode(False, False), _episode(True, False), _episode(False, True)]
    assert over_turn(eps).tolist() == [False, True, True]
    assert over_turn([]).tolist() == []


def test_loss_rows_drop_cut_episodes_only_when_switched_on() -> None:
    valid = torch.tensor([True, True, True, False])
    cut = torch.tensor([False, True, False, True])
    assert loss_rows(valid, cut, mask_cut=True).tolist() == [True, False, True, False]
    assert loss_rows(valid, cut, mask_cut=False).tolist() == [True, True, True, False]
    assert AlgoConfig().mask_truncated is False


def test_masked_episode_stays_in_the_group_baseline() -> None:
    # rewards (1, 0, 0, 0), episode 3 cut at the turn cap with reward 0. Its reward still counts in the
    # baseline (mean 1/4, as Mini-o3 computes GRPO advantages before masking): episode 0 gets 0.75, not
    # the 2/3 of a baseline without it, and episode 3's tokens leave the loss.
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])
    valid = torch.ones(4, dtype=torch.bool)
    adv = grpo(rewards, 4, valid=valid, scale_by_std=False)
    rows = loss_rows(valid, torch.tensor([False, False, False, True]), mask_cut=True)
    assert adv.tolist() == [0.75, -0.25, -0.25, -0.25]
    assert rows.tolist() == [True, True, True, False]
