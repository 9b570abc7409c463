"""The conformance checker passes real scripted episodes and catches each planted mismatch."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from evidra.core.types import Span
from evidra.models.context import Context
from evidra.rl.conformance import check_episodes, image_runs
from evidra.rl.conformance_run import ConformanceSettings, random_batch, synthetic_pages
from evidra.rollout import Episode, HFBackend
from evidra.rollout.recording import RecordingBackend

TOLERANCE = 1e-4


@pytest.fixture(scope="module")
def batch(tiny_vlms: dict[str, Any], tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Six scripted search episodes on tiny Qwen2.5-VL and the sampler's record of them."""
    vlm = tiny_vlms["qwen2_5_vl"]
    rng = random.Random(3)
    pages = synthetic_pages(Path(tmp_path_factory.mktemp("pages")), 12, rng)
    episodes, record = random_batch(vlm, "search", pages, rng, 3, ConformanceSettings(), seed=3)
    return vlm, episodes, record


def _rebuilt(
    ep: Episode, ids: list[int], mask: list[int], logprobs: list[float], turns: list[Span]
) -> Episode:
    """``ep`` with another response (ids, mask, log-probs, turn spans), its context to match."""
    t = ep.trajectory
    trajectory = replace(
        t, token_ids=tuple(ids), policy_mask=tuple(mask), logprobs=tuple(logprobs), turns=tuple(turns)
    )
    c = ep.context
    context = Context(t.prompt_ids + tuple(ids), c.pixel_values, c.image_grid_thw, c.images)
    return replace(ep, trajectory=trajectory, context=context)


def _with_response_images(vlm: Any, episodes: list[Episode]) -> int:
    return next(i for i, ep in enumerate(episodes) if vlm.image_token_id in ep.trajectory.token_ids)


def test_scripted_episodes_pass_every_check(batch: Any) -> None:
    vlm, episodes, record = batch
    checks = check_episodes(vlm, episodes, record, tolerance=TOLERANCE)
    assert [c.problems for c in checks] == [()] * len(episodes)
    assert all(
        c.policy_tokens == ep.trajectory.num_policy_tokens for c, ep in zip(checks, episodes, strict=True)
    )
    assert all(0 <= c.max_gap <= TOLERANCE for c in checks)
    assert any(c.images >= 2 for c in checks)  # pages and crops were inserted
    assert all(
        c.image_tokens == ep.context.token_ids.count(vlm.image_token_id)
        for c, ep in zip(checks, episodes, strict=True)
    )


def test_a_planted_extra_image_token_is_caught(batch: Any) -> None:
    vlm, episodes, record = batch
    k = _with_response_images(vlm, episodes)
    ep = episodes[k]
    t = ep.trajectory
    start, length = image_runs(t.token_ids, vlm.image_token_id)[0]
    at = start + length  # one more <|image_pad|> at the end of the first inserted image's run
    ids = [*t.token_ids[:at], vlm.image_token_id, *t.token_ids[at:]]
    mask = [*t.policy_mask[:at], 0, *t.policy_mask[at:]]
    logprobs = [*t.logprobs[:at], 0.0, *t.logprobs[at:]]
    turns = [s if s.end <= at else Span(s.start + 1, s.end + 1) for s in t.turns]
    planted = [*episodes[:k], _rebuilt(ep, ids, mask, logprobs, turns), *episodes[k + 1 :]]
    checks = check_episodes(vlm, planted, record, tolerance=TOLERANCE)
    assert checks[k].kinds == ("images",)
    assert any(f"{length + 1} <|image_pad|> tokens for {length} features" in p for _, p in checks[k].problems)
    assert all(c.ok for i, c in enumerate(checks) if i != k)  # the others still go through the trainer


def test_a_retokenised_turn_is_caught(batch: Any) -> None:
    vlm, episodes, record = batch
    ep = episodes[0]
    t = ep.trajectory
    a, b = t.turns[0].start, t.turns[0].end
    sampled = list(t.token_ids[a:b])
    ended = sampled[-1] in vlm.eos_token_ids
    canonical = (
        vlm.tokenizer(t.texts[0], add_special_tokens=False)["input_ids"] + sampled[len(sampled) - ended :]
    )
    assert canonical != sampled and vlm.tokenizer.decode(canonical) == vlm.tokenizer.decode(sampled)
    shift = len(canonical) - len(sampled)
    ids = [*t.token_ids[:a], *canonical, *t.token_ids[b:]]
    mask = [*t.policy_mask[:a], *([1] * len(canonical)), *t.policy_mask[b:]]
    logprobs = [
        *t.logprobs[:a],
        *(t.logprobs[a + min(i, b - a - 1)] for i in range(len(canonical))),
        *t.logprobs[b:],
    ]
    turns = [Span(a, b + shift), *(Span(s.start + shift, s.end + shift) for s in t.turns[1:])]
    checks = check_episodes(vlm, [_rebuilt(ep, ids, mask, logprobs, turns)], record, tolerance=TOLERANCE)
    assert "ids" in checks[0].kinds
    assert checks[0].problems[0] == ("ids", f"turn 0 ({len(canonical)} tokens at 0): its ids differ")


def test_a_shifted_logprob_is_caught(batch: Any) -> None:
    vlm, episodes, record = batch
    ep = episodes[1]
    t = ep.trajectory
    pos = t.turns[-1].start
    logprobs = list(t.logprobs)
    logprobs[pos] += 10 * TOLERANCE
    shifted = replace(ep, trajectory=replace(t, logprobs=tuple(logprobs)))
    (check,) = check_episodes(vlm, [shifted], record, tolerance=TOLERANCE)
    assert check.kinds == ("logprobs",)
    assert 9 * TOLERANCE < check.max_gap < 11 * TOLERANCE


def test_turns_the_sampler_never_made_are_caught(batch: Any) -> None:
    vlm, episodes, _ = batch
    empty = RecordingBackend(inner=HFBackend(vlm))  # never asked: an empty record
    (check,) = check_episodes(vlm, episodes[:1], empty, tolerance=TOLERANCE)
    assert check.kinds == ("ids",)
    assert all("no completion was sampled after its context" in p for _, p in check.problems)
    assert len(check.problems) == episodes[0].trajectory.num_turns


def test_pixels_that_are_not_the_images_are_caught(batch: Any) -> None:
    vlm, episodes, record = batch
    k = _with_response_images(vlm, episodes)
    ep = episodes[k]
    c = ep.context
    pixels = c.pixel_values.clone()
    pixels[-1] += 0.5  # the last image's last patch: its grid and tokens still agree
    (check,) = check_episodes(vlm, [replace(ep, context=replace(c, pixel_values=pixels))], record)
    assert check.kinds == ("images",)
    assert check.problems == (
        ("images", f"image {c.num_images - 1}: its pixel values differ from the processor's"),
    )
