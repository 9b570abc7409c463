"""The CAVE task: zoom into one image, answer; rewarded by outcome plus process credits (CAVE §3).

Training data is what the paper trains on (§4, App. C): TRACER-style scenarios (rule-switching
navigation, non-semantic tracing, embedded matching, sub-image matching) plus Tunnel-Vision-style
auxiliary tasks (scavenger-hunt chains, circuits, object re-identification), drawn from the
generators of ``evidra.data.synth`` on their train split in equal parts (``data.synthetic``
picks other sources). A sample with two images (a source and a candidate) is shown as one
image of two panels, since the zoom tool works on one image. The evidence units of the
evidence-acquisition credit are the samples' perception fields (``Sample.gold_evidence``),
and the answer anchor is the Tunnel-Vision / TRACER accuracy (the braced rule judge). Scoring
needs the policy model (teacher forcing under each state), so the task scores whole groups of
episodes (``Task.score_episodes``): the states and targets of every episode go through
``evidra.rewards.cave_scoring``, and each episode's per-turn credits land in
``RewardResult.turns`` for ``algo.advantage=turn_credit``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any

from evidra.data.synth.sources import side_by_side
from evidra.env.base import play_script
from evidra.env.zoom import ZoomEnv
from evidra.methods._benchmark import adapter, first_gold_page, has_pages, images_on_disk, is_answerable
from evidra.methods.base import METHODS, Method, Resources, merged_weights, method_judge
from evidra.paradigms.zoom_agent import TOOL_NAME, ZoomAgent
from evidra.rewards.base import RewardResult
from evidra.rewards.cave import CaveParams, CaveWeights, Outcome, StateScore, cave_reward
from evidra.rewards.cave_scoring import score_states
from evidra.rewards.judge import Judge, JudgeItem, RuleJudge
from evidra.rewards.judge_config import JudgeConfig
from evidra.rl.config import DataConfig
from evidra.rl.tasks import Task, synthetic_mixture, usable
from evidra.types import Message, Parsed, Sample, Trajectory

MAX_ROUNDS = 4
PARAMS = CaveParams()
TRAINING_MIX = ("tracer", "tunnel")  # CAVE App. C: four TRACER-style families + three Tunnel-style
_JUDGE = RuleJudge("braced")


def _one_image(samples: list[Sample], cfg: DataConfig) -> list[Sample]:
    """``Task.from_synthetic``: the answerable samples, each as one image."""
    what = f"task {cfg.task} on {'+'.join(cfg.synthetic)}"
    kept = usable(samples, (has_pages, images_on_disk, is_answerable), what)
    return [side_by_side(s) for s in kept]


def _samples(cfg: DataConfig) -> list[Sample]:
    """The paper's training mixture (``data.synthetic`` names another)."""
    mix = replace(cfg, synthetic=TRAINING_MIX)
    return _one_image(synthetic_mixture(mix), mix)


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
    """A correct conversation: zoom on the evidence region (with a margin) when the sample has
    one, read it, answer; otherwise state the perception evidence and answer."""
    box = sample.extras.get("evidence_box") or (sample.gold_boxes[0].box if sample.gold_boxes else None)
    evidence = " ".join(t for t in sample.gold_evidence.values() if t) or "The image shows the answer."
    final = f"<answer>{sample.answers[0]}</answer>"
    if box is None:
        return play_script(make_env(sample), sample, [f"<think>{evidence}</think>{final}"])
    page, margin = sample.pages[0], 8
    coords = [max(0, int(box.x1) - margin), max(0, int(box.y1) - margin),
              min(page.width, int(box.x2) + margin), min(page.height, int(box.y2) + margin)]  # fmt: skip
    call = json.dumps({"name": TOOL_NAME, "arguments": {"bbox_2d": coords}})
    turns = [
        "<think>The text is too small to read; zoom into the relevant region.</think>"
        f"<tool_call>{call}</tool_call>",
        f"<think>The zoomed region shows the answer.</think>{final}",
    ]
    return play_script(make_env(sample), sample, turns)


def make_cave_task(judge: Judge, params: CaveParams = PARAMS) -> Task:
    """The CAVE task whose answer anchor asks ``judge`` (offline: the braced rule), its credits
    weighted by ``params``."""

    def outcome_only(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        texts = trajectory.texts if trajectory is not None and trajectory.texts else (parsed.text,)
        anchors = outcome(texts, sample, judge)
        if anchors is None:
            return RewardResult.unscored("judge")
        return cave_reward([StateScore(0.0, 0.0)], [None], anchors, params)

    return Task(
        name="cave",
        samples=_samples,
        make_env=make_env,
        parse=ZoomAgent().parse,
        reward=outcome_only,
        oracle=oracle,
        score_episodes=partial(score_episodes, params=params, judge=judge),
        from_benchmark=adapter((has_pages, images_on_disk, is_answerable), first_gold_page),
        from_synthetic=_one_image,
    )


@dataclass(frozen=True)
class CaveOptions:
    """The ``method:`` section of a CAVE recipe."""

    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the answer anchor; default: the braced rule
    # credit and anchor (belief, evidence, focus, accuracy, format) -> weight over CaveWeights'
    weights: Mapping[str, float] = field(default_factory=dict)


def build_cave(cfg: CaveOptions, resources: Resources) -> Task:
    """CAVE's task with its answer judge and its credit and anchor weights."""
    weights = merged_weights("cave", asdict(PARAMS.weights), cfg.weights)
    params = replace(PARAMS, weights=CaveWeights(**weights))
    return make_cave_task(method_judge(cfg.judge, resources, "vragrl", _JUDGE), params)


METHODS.add(
    "cave",
    Method(
        name="cave",
        options=CaveOptions,
        build=build_cave,
        paradigm="zoom_agent",
        summary="CAVE: zoom into one image; outcome plus per-turn process credits",
    ),
)
