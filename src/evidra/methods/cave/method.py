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
``evidra.methods.cave.states``, and each episode's per-turn credits land in
``RewardResult.turns`` for ``algo.advantage=turn_credit``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from evidra.core.types import Box, Message, Sample
from evidra.data.synth.sources import side_by_side
from evidra.env.environment import play_script
from evidra.env.zoom import ZoomEnv
from evidra.methods._benchmark import adapter, first_gold_page, has_pages, images_on_disk, is_answerable
from evidra.methods.cave.credits import WEIGHTS, CaveParams, evidence_units
from evidra.methods.cave.paradigm import TOOL_NAME, ZoomAgent
from evidra.methods.cave.reward import CaveReward
from evidra.methods.method import METHODS, Method, Resources, merged_weights, method_judge
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_config import JudgeConfig
from evidra.rewards.judge_protocol import Judge
from evidra.rl.run_config import DataConfig
from evidra.rl.runs.model_card import Paper
from evidra.rl.tasks import Task, synthetic_mixture, usable

PARAMS = CaveParams()
MAX_ROUNDS = PARAMS.max_rounds  # the environment's round limit is the anchor's
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
    return ZoomEnv(ZoomAgent(), max_rounds=MAX_ROUNDS)


def zoom_region(sample: Sample) -> Box | None:
    """Where the oracle zooms: the evidence region (``Sample.evidence_box``), else the gold box,
    when it lies on the one image the zoom tool sees."""
    page = sample.pages[0].id if sample.pages else None
    boxes = [sample.evidence_box, *sample.gold_boxes] if sample.evidence_box else list(sample.gold_boxes)
    return next((b.box for b in boxes if b.page_id == page), None)


def oracle(sample: Sample) -> list[Message]:
    """A correct conversation of the cold start's kind (CAVE D.1: DeepEyes-style interleaved
    tool use): zoom on the region that holds the evidence, with a margin, state the evidence seen
    there, answer. A sample without such a region answers from the whole image."""
    box = zoom_region(sample)
    evidence = " ".join(evidence_units(sample.gold_evidence.values())) or "The image shows the answer."
    final = f"<answer>{sample.answers[0]}</answer>"
    if box is None:
        return play_script(make_env(sample), sample, [f"<think>{evidence}</think>{final}"])
    page, margin = sample.pages[0], 8
    coords = [
        max(0, int(box.x1) - margin),
        max(0, int(box.y1) - margin),
        min(page.width, int(box.x2) + margin),
        min(page.height, int(box.y2) + margin),
    ]
    call = json.dumps({"name": TOOL_NAME, "arguments": {"bbox_2d": coords}})
    turns = [
        "<think>The details are small; zoom into the region that holds them.</think>"
        f"<tool_call>{call}</tool_call>",
        f"<think>{evidence}</think>{final}",
    ]
    return play_script(make_env(sample), sample, turns)


def make_cave_task(
    judge: Judge, weights: Mapping[str, float] | None = None, params: CaveParams = PARAMS
) -> Task:
    """The CAVE task whose answer anchor asks ``judge`` (offline: the braced rule), its credits
    weighted by ``weights`` (over the defaults) and shaped by ``params``."""
    reward = CaveReward(judge, params=params, parse=ZoomAgent().parse).reweighted(weights or {})
    return Task(
        name="cave",
        samples=_samples,
        make_env=make_env,
        parse=ZoomAgent().parse,
        reward=reward,
        oracle=oracle,
        score_episodes=reward.score_episodes,
        from_benchmark=adapter((has_pages, images_on_disk, is_answerable), first_gold_page),
        from_synthetic=_one_image,
    )


@dataclass(frozen=True)
class CaveOptions:
    """The ``method:`` section of a CAVE recipe."""

    judge: JudgeConfig = field(default_factory=JudgeConfig)  # the answer anchor; default: the braced rule
    # credit and anchor (belief, evidence, focus, accuracy, format, rounds) -> weight over the defaults
    weights: Mapping[str, float] = field(default_factory=dict)


def build_cave(cfg: CaveOptions, resources: Resources) -> Task:
    """CAVE's task with its answer judge and its credit and anchor weights."""
    weights = merged_weights("cave", WEIGHTS, cfg.weights)
    return make_cave_task(method_judge(cfg.judge, resources, CAVE.judge_prompt, _JUDGE), weights)


CAVE = Method(
    name="cave",
    options=CaveOptions,
    build=build_cave,
    paradigm="zoom_agent",
    summary="CAVE: zoom into one image; outcome plus per-turn process credits",
    judge_prompt="cave",
    citation=Paper("CAVE: A Structured Credit Assignment Approach for Fragmented Visual Evidence Reasoning"),
)
METHODS.add("cave", CAVE)
