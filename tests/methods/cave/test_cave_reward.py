"""CAVE credits: hand-computed credit maths, and the teacher-forcing service against a plain
one-sequence-at-a-time reference on the tiny model."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from PIL import Image

from evidra.core.errors import InvalidInputError
from evidra.core.types import ImagePart, Message, TextPart
from evidra.methods.cave.credits import (
    CaveParams,
    Outcome,
    StateScore,
    belief_gains,
    bounded,
    cave_reward,
    evidence_gains,
    focus_credit,
    target_scale,
)
from evidra.methods.cave.reward import CaveReward
from evidra.methods.cave.states import make_target, prefix_context, score_states, score_targets
from evidra.models.context import Context, encode_messages, encode_turn


def test_gains_and_focus_by_hand() -> None:
    states = [
        StateScore(-3.0, 1.0, (-4.0, -1.0)),
        StateScore(-2.0, 0.0, (-3.0, -2.0)),
        StateScore(-2.5, 0.2, (-1.0, -1.5)),
    ]
    assert belief_gains(states) == [1.0, -0.5]
    assert evidence_gains(states) == [0.5, 1.25]  # (1 + 0)/2, (2 + 0.5)/2: drops are not credited
    params = CaveParams()
    assert target_scale(1.0, params) == pytest.approx(0.5)
    assert target_scale(0.0, params) == pytest.approx(0.05)
    assert target_scale(7.0, params) == pytest.approx(0.5)  # clamped
    # area 0.4 vs target 0.5 (u = 1): 1 - 0.1 / 0.45
    assert focus_credit(0.4, 1.0, 0.2, 0.0, params) == pytest.approx(1 - 0.1 / 0.45)
    assert focus_credit(0.4, 1.0, 0.0, 0.0, params) == 0.0  # no progress, no credit
    assert focus_credit(None, 1.0, 1.0, 1.0, params) == 0.0  # no zoom
    assert focus_credit(1.0, 0.0, 1.0, 0.0, params) == 0.0  # far off the target: floored at 0
    assert bounded(3.0, 1.0) == 1.0 and bounded(-3.0, 1.0) == -1.0 and bounded(math.nan, 1.0) == 0.0


def test_cave_reward_turns_sum_to_total() -> None:
    states = [StateScore(-3.0, 1.0, (-4.0,)), StateScore(-1.0, 0.0, (-4.5,)), StateScore(-1.5, 0.5, (-2.0,))]
    params = CaveParams()
    weights = {"belief": 0.4, "evidence": 0.3, "focus": 0.3, "accuracy": 1.0, "format": 0.1}
    result = cave_reward(states, [0.5, None, None], Outcome(1.0, 1.0), params, weights)
    # turn 0: b = 2 -> clipped 1; e = 0; zoom 0.5 == target 0.5 (u = 1) and b > 0 -> f = 1
    t0 = 0.4 * 1.0 + 0.3 * 0.0 + 0.3 * 1.0
    # turn 1 (decay 0.9): b = -0.5, e = 2.5 -> clipped 1, no zoom
    t1 = 0.9 * (0.4 * -0.5 + 0.3 * 1.0)
    assert result.turns == pytest.approx((t0, t1, 1.1))
    assert result.total == pytest.approx(t0 + t1 + 1.1)
    assert result.components["belief"] == pytest.approx(1.0 - 0.45)
    assert result.components["accuracy"] == 1.0
    assert result.components["process"] == pytest.approx(t0 + t1)
    single = cave_reward([StateScore(-1.0, 0.3)], [None], Outcome(0.0, 1.0), params, weights)
    assert single.turns == pytest.approx((0.1,))
    with pytest.raises(InvalidInputError):
        cave_reward([], [], Outcome(0.0, 0.0))
    # the same credits under other weights: only the weighted sum changes
    belief_only = cave_reward(states, [0.5, None, None], Outcome(1.0, 1.0), params, {"belief": 1.0})
    assert belief_only.total == pytest.approx(1.0 + 0.9 * -0.5)
    assert belief_only.components["focus"] == result.components["focus"]


def test_cave_reward_is_registered_with_its_weights() -> None:
    from evidra.core.types import Page, Parsed, Sample
    from evidra.rewards.reward import REWARDS

    reward = REWARDS.get("cave")
    assert isinstance(reward, CaveReward)
    sample = Sample("s", "Which colour?", ("red",), (Page("p", "p.png", 10, 10),))
    # the braced rule judge: {Red} is the reference up to case; anchors only (no credits without
    # states): accuracy 1.0 + format 0.1 + answered within the round limit 0.1
    right = reward(Parsed(text="<answer>{Red}</answer>", answer="{Red}"), sample)
    assert right.total == pytest.approx(1.0 + 0.1 + 0.1) and right.turns == pytest.approx((1.2,))
    wrong = reward(Parsed(text="<answer>dark red</answer>", answer="dark red"), sample)
    assert wrong.total == pytest.approx(0.2)
    with pytest.raises(InvalidInputError, match="did you mean 'belief'"):
        reward.reweighted({"beleif": 1.0})


def _reference(
    vlm: Any, state: Context, target_ids: tuple[int, ...], lo: int, hi: int, k: int
) -> tuple[float, float]:
    """Score one sequence without padding or batching: logits of the whole sequence."""
    ids = torch.tensor([state.token_ids + target_ids])
    inputs: dict[str, Any] = {
        "input_ids": ids,
        "attention_mask": torch.ones_like(ids),
        "mm_token_type_ids": (ids == vlm.image_token_id).long(),
    }
    if state.pixel_values is not None:
        inputs.update(pixel_values=state.pixel_values, image_grid_thw=state.image_grid_thw)
    with torch.no_grad():
        logits = vlm.model(**inputs, use_cache=False).logits[0].float()
    n = len(state.token_ids)
    lps, ents = [], []
    for j in range(lo, hi):
        row = logits[n + j - 1]
        lps.append(float(torch.log_softmax(row, -1)[target_ids[j]]))
        top = torch.softmax(row.topk(k).values, -1)
        ents.append(float(-(top * top.log()).sum()) / math.log(k))
    return sum(lps) / len(lps), sum(ents) / len(ents)


def _episode(vlm: Any) -> tuple[Context, int, list[int]]:
    """Prompt with an image, a policy turn, an image observation, a second policy turn."""
    proc = vlm.processor
    image = Image.new("RGB", (64, 56), (200, 30, 30))
    prompt = encode_messages(proc, [Message("user", (ImagePart(image), TextPart("What colour?")))])
    turn1 = tuple(
        vlm.tokenizer("<think>zoom</think><tool_call>{}</tool_call>", add_special_tokens=False)["input_ids"]
    )
    ctx = prompt.append_ids(turn1)
    obs = encode_turn(
        proc, [Message("user", (ImagePart(Image.new("RGB", (56, 56), (0, 0, 250))),))], close_previous=True
    )
    ctx = ctx.extend(obs)
    start2 = len(ctx) - len(prompt)
    ctx = ctx.append_ids(
        tuple(vlm.tokenizer("<answer> red </answer>", add_special_tokens=False)["input_ids"])
    )
    return ctx, len(prompt), [0, start2]


def test_prefix_context_keeps_whole_images(tiny_vlms: dict[str, Any]) -> None:
    vlm = tiny_vlms["qwen2_5_vl"]
    ctx, plen, starts = _episode(vlm)
    assert ctx.num_images == 2
    s0, s1 = (prefix_context(ctx, plen + s, vlm.image_token_id) for s in starts)
    assert s0.num_images == 1 and s1.num_images == 2
    assert s0.pixel_values.shape[0] == int(ctx.image_grid_thw[0].prod())
    assert prefix_context(ctx, 3, vlm.image_token_id).pixel_values is None


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_teacher_forcing_matches_reference(tiny_vlms: dict[str, Any], arch: str) -> None:
    vlm = tiny_vlms[arch]
    ctx, plen, starts = _episode(vlm)
    states = [prefix_context(ctx, plen + s, vlm.image_token_id) for s in starts]
    target = make_target(vlm.tokenizer, "red square", "<answer> ", " </answer>")
    assert target.end > target.start > 0
    unit = make_target(vlm.tokenizer, "The square is red.")
    batched = score_targets(
        vlm, [states[0], states[1], states[1]], [target, target, unit], top_k=5, batch_size=2
    )
    expected = [
        _reference(vlm, states[0], target.ids, target.start, target.end, 5),
        _reference(vlm, states[1], target.ids, target.start, target.end, 5),
        _reference(vlm, states[1], unit.ids, unit.start, unit.end, 5),
    ]
    for got, (lp, ent) in zip(batched, expected, strict=True):
        assert got.mean_logprob == pytest.approx(lp, abs=1e-4)
        assert got.uncertainty == pytest.approx(ent, abs=1e-4)
        assert 0.0 <= got.uncertainty <= 1.0
    per = score_states(vlm, [(ctx, plen, starts, "red square", ["The square is red."])], top_k=5)
    assert len(per) == 1 and len(per[0]) == 2
    assert per[0][1].answer == pytest.approx(expected[1][0], abs=1e-4)
    assert per[0][1].evidence[0] == pytest.approx(expected[2][0], abs=1e-4)


def _counting(vlm: Any) -> tuple[list[int], Any]:
    """Counts the model's forward calls ``[calls, sequences]``; returns the counter and its hook."""
    seen = [0, 0]

    def count(module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        seen[0] += 1
        seen[1] += int(kwargs["input_ids"].shape[0])

    return seen, vlm.model.register_forward_pre_hook(count, with_kwargs=True)


def _two_episodes(vlm: Any) -> list[tuple[Context, int, list[int], str, list[str]]]:
    ctx, plen, starts = _episode(vlm)
    longer = ctx.append_ids(tuple(vlm.tokenizer(" and more", add_special_tokens=False)["input_ids"]))
    units = ["The square is red.", "It sits top left."]
    return [
        (ctx, plen, starts, "red square", units),
        (longer, plen, [*starts, len(ctx) - plen], "red", units[:1]),
    ]


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl"])
def test_packed_credits_equal_the_per_target_path_in_fewer_forwards(
    tiny_vlms: dict[str, Any], arch: str
) -> None:
    vlm = tiny_vlms[arch]
    episodes = _two_episodes(vlm)
    seen, hook = _counting(vlm)
    try:
        plain = score_states(vlm, episodes, top_k=5, packed=False, batch_size=4)
        plain_calls, seen[:] = list(seen), [0, 0]
        packed = score_states(vlm, episodes, top_k=5, packed=True)
        packed_calls, seen[:] = list(seen), [0, 0]
        together = score_states(vlm, episodes, top_k=5, packed=True, episodes_per_forward=2)
    finally:
        hook.remove()
    # plain: one row per state x target, 2 x 3 + 3 x 2 = 12 rows in batches of 4; packed: one row
    # per episode, one forward each (or both in one forward)
    assert plain_calls == [3, 12] and packed_calls == [2, 2] and seen == [1, 2]
    for got in (packed, together):
        assert [len(p) for p in got] == [2, 3]
        for p_ep, q_ep in zip(got, plain, strict=True):
            for p, q in zip(p_ep, q_ep, strict=True):
                assert p.answer == pytest.approx(q.answer, abs=1e-5)
                assert p.uncertainty == pytest.approx(q.uncertainty, abs=1e-5)
                assert p.evidence == pytest.approx(q.evidence, abs=1e-5)
    # the states differ by far more than the tolerance, so a branch that saw the wrong prefix would show
    assert abs(plain[0][0].answer - plain[0][1].answer) > 1e-3


def test_packed_credits_with_eager_attention(tiny_dirs: dict[str, Any], tiny_vlms: dict[str, Any]) -> None:
    from evidra.models.branches import packable
    from evidra.models.loading import load_vlm

    eager = load_vlm(tiny_dirs["qwen2_5_vl"], attn_implementation="eager")
    assert packable(eager) and packable(tiny_vlms["qwen2_5_vl"])
    episodes = _two_episodes(eager)
    packed = score_states(eager, episodes, top_k=5, packed=True)
    plain = score_states(tiny_vlms["qwen2_5_vl"], episodes, top_k=5, packed=False)  # sdpa, per target
    for p_ep, q_ep in zip(packed, plain, strict=True):
        for p, q in zip(p_ep, q_ep, strict=True):
            assert p.answer == pytest.approx(q.answer, abs=1e-5)
            assert p.evidence == pytest.approx(q.evidence, abs=1e-5)


def test_branches_refuse_what_they_cannot_score(tiny_vlms: dict[str, Any]) -> None:
    from types import SimpleNamespace

    from evidra.models.branches import Branch, pack, packable

    vlm = tiny_vlms["qwen2_5_vl"]
    ctx, _, _ = _episode(vlm)
    with pytest.raises(InvalidInputError, match="prefix length"):
        pack(vlm, ctx, [Branch(len(ctx) + 1, (5,))])
    with pytest.raises(InvalidInputError, match="needs tokens"):
        pack(vlm, ctx, [Branch(3, ())])
    flash = SimpleNamespace(
        model=SimpleNamespace(config=SimpleNamespace(_attn_implementation="flash_attention_2"))
    )
    assert not packable(flash)  # such a model takes the per-target path
