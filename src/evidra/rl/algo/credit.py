"""From episodes and their rewards to per-token advantages, for every estimator in ``ADVANTAGES``.

``advantage_inputs`` turns a batch of episodes into the one record every estimator takes
(``estimators.AdvantageInputs``): scalar rewards, the reward channels on their token scopes
(``Trajectory.scopes``, channels from ``RewardResult.scopes``) when the task names scopes, and the
per-turn credits (``RewardResult.turns``) on each turn's tokens. ``token_advantages`` looks the
configured estimator up by name and spreads its result over the tokens: no estimator is named
here, so a new one is a new registered function in ``estimators``. For SPO (``spo``) it also
builds how alike the rollouts' states are before each turn (``prefix_similarity``).

``loss_rows`` is Mini-o3's over-turn masking (``algo.mask_truncated``): the episodes cut at the
turn cap or by the token limits keep their place in their group's baseline but add no policy loss.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from evidra.rewards.reward import RewardResult
from evidra.rl.algo.advantages import ScopedAdvantages, scope_masks_from_spans
from evidra.rl.algo.estimators import ADVANTAGES, AdvantageInputs
from evidra.rl.run_config import AlgoConfig
from evidra.rollout import Episode

if TYPE_CHECKING:
    from torch import Tensor


def _policy_mask(episodes: Sequence[Episode], length: int) -> Tensor:
    import torch

    policy = torch.zeros(len(episodes), length)  # (N, L)
    for i, ep in enumerate(episodes):
        mask = ep.trajectory.policy_mask
        policy[i, : len(mask)] = torch.tensor(mask, dtype=torch.float32)
    return policy


def _turn_credits(episodes: Sequence[Episode], results: Sequence[RewardResult]) -> tuple[Tensor, Tensor]:
    """Per-turn credits ``(N, T)`` (``RewardResult.turns``, 0 where a reward gives none) and a mask
    ``(N, T)`` of the turns each episode has."""
    import torch

    n = len(episodes)
    t_max = max(1, max(ep.trajectory.num_turns for ep in episodes))
    values = torch.zeros(n, t_max)  # (N, T)
    present = torch.zeros(n, t_max)  # (N, T)
    for i, (ep, res) in enumerate(zip(episodes, results, strict=True)):
        turns = list(res.turns)[: ep.trajectory.num_turns]
        values[i, : len(turns)] = torch.tensor(turns, dtype=torch.float32)
        present[i, : ep.trajectory.num_turns] = 1.0
    return values, present


def advantage_inputs(
    algo: AlgoConfig,
    episodes: Sequence[Episode],
    results: Sequence[RewardResult],
    rewards: Tensor,
    valid: Tensor,
    group_size: int,
    scope_names: Sequence[str] = (),
) -> AdvantageInputs:
    """The estimators' input record for a batch; a group with one valid episode gets advantage 0."""
    import torch

    length = max(1, max(len(ep.trajectory.token_ids) for ep in episodes))
    channels = masks = None
    if scope_names:
        channels = torch.tensor([[r.scopes.get(n, 0.0) for n in scope_names] for r in results])  # (N, K)
        masks = scope_masks_from_spans(
            [ep.trajectory.scopes for ep in episodes],
            scope_names,
            length,
            policy_mask=_policy_mask(episodes, length),
        )  # (N, K, L)
    credits, present = _turn_credits(episodes, results)  # (N, T), (N, T)
    similarity = None
    if ADVANTAGES.get(algo.advantage).needs_similarity:
        states = [turn_states(ep) for ep in episodes]
        similarity = prefix_similarity(states, [ep.group for ep in episodes], credits.shape[1])  # (N, N, T)
    return AdvantageInputs(
        rewards,
        group_size,
        valid=valid,
        scale_by_std=algo.scale_by_std,
        eps=algo.eps,
        singleton="zero",
        length=length,
        scope_rewards=channels,
        scope_masks=masks,
        turn_credits=credits,
        turn_mask=present,
        turn_spans=[ep.trajectory.turns for ep in episodes],
        similarity=similarity,
    )


def token_advantages(
    algo: AlgoConfig,
    episodes: Sequence[Episode],
    results: Sequence[RewardResult],
    rewards: Tensor,
    valid: Tensor,
    group_size: int,
    scope_names: Sequence[str] = (),
) -> Tensor | ScopedAdvantages:
    """Advantages ``(N, L)``: row i covers episode i's tokens (0 past its end); ``ScopedAdvantages``
    ``(N, K, L)`` for an estimator whose loss is taken per scope (``router``)."""
    inputs = advantage_inputs(algo, episodes, results, rewards, valid, group_size, scope_names)
    return ADVANTAGES.get(algo.advantage).fn(inputs).to_tokens(inputs.length)


_WORD = re.compile(r"\w+")
MAX_STATE_WORDS = 64  # words of one action argument that count towards its state (a bound on hostile text)


def turn_states(episode: Episode) -> list[frozenset[str]]:
    """What each policy turn did, as words: ``name:word`` for each word of the action's argument
    (lower-cased, at most ``MAX_STATE_WORDS``), or ``name:`` for an action without one; the
    environment's action name when the turn was not parsed."""
    out = []
    for k, info in enumerate(episode.infos):
        parsed = episode.parsed[k] if k < len(episode.parsed) else None
        action = parsed.action if parsed is not None else None
        name = action.name if action is not None else info.action
        words = _WORD.findall(action.argument.lower())[:MAX_STATE_WORDS] if action is not None else []
        out.append(frozenset(f"{name}:{w}" for w in words) or frozenset({f"{name}:"}))
    return out


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)


def prefix_similarity(
    states: Sequence[Sequence[frozenset[str]]], groups: Sequence[int], t_max: int
) -> Tensor:
    """(N, N, T): the Jaccard similarity of rollouts i's and j's actions before i's turn k (the
    union of their turns' words, ``turn_states``); 0 across groups, 1 on the diagonal.

    Before turn 0 every rollout is in the initial state, so all its group's similarities are 1.

    >>> s = prefix_similarity([[frozenset({"search:a"})], [frozenset({"search:b"})]], [0, 0], 2)
    >>> s[0, 1].tolist(), s[0, 0].tolist()
    ([1.0, 0.0], [1.0, 1.0])
    """
    import torch

    n = len(states)
    prefixes = [[frozenset().union(*row[:k]) for k in range(t_max)] for row in states]
    members: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    out = torch.zeros(n, n, t_max)  # (N, N, T)
    for rows in members.values():
        for i in rows:
            for j in rows:
                out[i, j] = torch.tensor([_jaccard(prefixes[i][k], prefixes[j][k]) for k in range(t_max)])
    return out


def over_turn(episodes: Sequence[Episode]) -> Tensor:
    """(N,) bool: episodes that ended without finishing, cut at the turn cap (the rollout loop's or
    the environment's ``StepInfo.turn_limit``) or by the token/context limits (``truncated``)."""
    import torch

    return torch.tensor(
        [ep.trajectory.truncated or (bool(ep.infos) and ep.infos[-1].turn_limit) for ep in episodes],
        dtype=torch.bool,
    )


def loss_rows(valid: Tensor, cut: Tensor, *, mask_cut: bool) -> Tensor:
    """(N,) rows whose tokens enter the policy loss: the valid ones, less the ``cut`` ones when
    ``mask_cut`` (Mini-o3's over-turn masking; their rewards still enter the group baseline).

    >>> import torch
    >>> loss_rows(torch.tensor([True, True, False]), torch.tensor([False, True, True]), mask_cut=True)
    tensor([ True, False, False])
    """
    return valid & ~cut if mask_cut else valid
