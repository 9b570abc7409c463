"""The CAVE task: zoom into one image, answer; rewarded by outcome plus process credits (CAVE §3).

TRACER-Bench has no public generator, so samples are synthetic document
pages drawn as single images (``generate_image_documents``) at a low resolution, where the
answer is small text that rewards zooming; the evidence units of the evidence-acquisition
credit are the generated evidence sentences (``Sample.gold_evidence``), the analogue of
TRACER's perception field. Scoring needs the policy model (teacher forcing under each state),
so the task scores whole groups of episodes (``Task.score_episodes``): every state x target of
the group goes through ``evidra.rewards.cave_scoring`` in shared batches, and each episode's
per-turn credits land in ``RewardResult.turns`` for ``algo.advantage=turn_credit``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from typing import Any

from evidra.env.base import play_script
from evidra.env.zoom import ZoomEnv
from evidra.method_config import MethodConfig
from evidra.methods._benchmark import adapter, first_gold_page, has_pages, images_on_disk, is_answerable
from evidra.methods.base import METHODS, Resources, check_options, method_judge
from evidra.methods.vragrl import corpus_dir, synth_once
from evidra.paradigms.zoom_agent import TOOL_NAME, ZoomAgent
from evidra.rewards.base import RewardResult
from evidra.rewards.cave import CaveParams, Outcome, StateScore, cave_reward
from evidra.rewards.cave_scoring import score_states
from evidra.rewards.judge import Judge, JudgeItem, RuleJudge
from evidra.rl.config import DataConfig
from evidra.rl.tasks import Task
from evidra.types import Message, Parsed, Sample, Trajectory

DPI = 60  # low resolution: body text is a few pixels high, so reading it pays a zoom
MAX_ROUNDS = 4
PARAMS = CaveParams()
_JUDGE = RuleJudge("contains")


def _samples(cfg: DataConfig) -> list[Sample]:
    from evidra.data.synth.documents import generate_image_documents

    root = corpus_dir(cfg, "cave")
    n_docs = max(2, cfg.size)
    corpus = synth_once(
        root, lambda r: generate_image_documents(r / "synth", n_docs=n_docs, seed=cfg.seed, dpi=DPI)
    )
    samples = [s for s in corpus.samples(dataset="synth.cave") if s.answerable]
    return [replace(s, pages=s.pages[:1]) for s in samples[: cfg.size]]


def make_env(sample: Sample) -> ZoomEnv:
    return ZoomEnv(max_rounds=MAX_ROUNDS)


def outcome(texts: Sequence[str], sample: Sample, judge: Judge = _JUDGE) -> Outcome | None:
    """Task anchors (CAVE §3.3): answer correctness (the judge) and format validity of every
    turn; None when the judge could not decide (the episode is then unscored, never 0)."""
    agent = ZoomAgent()
    parsed = [agent.parse(t) for t in texts]
    last = parsed[-1] if parsed else Parsed(text="")
    fmt = float(bool(parsed) and last.answer is not None and all(p.ok for p in parsed))
    if last.answer is None or not sample.answers:
        return Outcome(0.0, fmt)
    verdict = judge.judge([JudgeItem(sample.question, sample.answers[0], last.answer)])[0]
    if verdict.value is None:
        return None
    return Outcome(float(verdict.value), fmt)


def _units(sample: Sample) -> list[str]:
    return [text for text in sample.gold_evidence.values() if text]


def score_episodes(
    vlm: Any, episodes: Sequence[Any], params: CaveParams = PARAMS, judge: Judge = _JUDGE
) -> list[RewardResult]:
    """Outcome + process credits of each episode; teacher forcing batched over all of them."""
    rows = []
    for ep in episodes:
        traj = ep.trajectory
        starts = [span.start for span in traj.turns] or [0]
        answer = ep.sample.answers[0] if ep.sample.answers else ""
        rows.append((ep.context, len(traj.prompt_ids), starts, answer, _units(ep.sample)))
    states = score_states(vlm, rows, top_k=params.top_k)
    out = []
    for ep, per in zip(episodes, states, strict=True):
        n = len(per)
        ratios = [ep.infos[t].area_ratio if t < len(ep.infos) else None for t in range(n)]
        anchors = outcome(ep.trajectory.texts, ep.sample, judge)
        out.append(
            RewardResult.unscored("judge") if anchors is None else cave_reward(per, ratios, anchors, params)
        )
    return out


def oracle(sample: Sample) -> list[Message]:
    """Zoom on the evidence region (with a margin), read it, answer."""
    page = sample.pages[0]
    box = sample.extras.get("evidence_box") or sample.gold_boxes[0].box
    margin = 8
    coords = [max(0, int(box.x1) - margin), max(0, int(box.y1) - margin),
              min(page.width, int(box.x2) + margin), min(page.height, int(box.y2) + margin)]  # fmt: skip
    call = json.dumps({"name": TOOL_NAME, "arguments": {"bbox_2d": coords}})
    turns = [
        "<think>The text is too small to read; zoom into the relevant region.</think>"
        f"<tool_call>{call}</tool_call>",
        f"<think>The zoomed region shows the answer.</think><answer>{sample.answers[0]}</answer>",
    ]
    return play_script(make_env(sample), sample, turns)


def make_cave_task(judge: Judge) -> Task:
    """The CAVE task whose answer anchor asks ``judge`` (offline: a containment rule)."""

    def outcome_only(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        texts = trajectory.texts if trajectory is not None and trajectory.texts else (parsed.text,)
        anchors = outcome(texts, sample, judge)
        if anchors is None:
            return RewardResult.unscored("judge")
        return cave_reward([StateScore(0.0, 0.0)], [None], anchors, PARAMS)

    return Task(
        name="cave",
        samples=_samples,
        make_env=make_env,
        parse=ZoomAgent().parse,
        reward=outcome_only,
        oracle=oracle,
        score_episodes=partial(score_episodes, judge=judge),
        from_benchmark=adapter((has_pages, images_on_disk, is_answerable), first_gold_page),
    )


@METHODS.register("cave")
def build_cave(cfg: MethodConfig, resources: Resources) -> Task:
    """CAVE's task with its answer judge (``method.judge``; offline: a containment rule)."""
    check_options(cfg, ("judge",))
    return make_cave_task(method_judge(cfg, resources, "vragrl", _JUDGE))
