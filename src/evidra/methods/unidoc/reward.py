"""UniDoc-RL's dense multi-reward: one component per action type (the released reward manager,
``RLTrain/verl/workers/reward_manager/rm.py`` and ``verl/utils/reward_score/vrag.py``).

For an episode whose searches s = 1..S each showed candidates ``C_s`` (best first), of which the
policy kept ``sel_s`` (the first candidate unless it wrote ``<select>``) and cropped boxes ``B_s``
from it:

* ``retrieval`` (search): NDCG of the candidates in the order rank 1 of every search, then rank 2
  of every search, then rank 3, each page once, binary relevance against the gold pages;
* ``select`` (rerank): mean over searches of ``[sel_s == g_s]``, where ``g_s`` is the first gold
  page of ``C_s``, or ``C_s[0]`` when ``C_s`` holds none;
* ``crop`` (perception): mean over searches of the box F1 on ``sel_s``: 1 when the page needs no
  crop and none was made, 0 when only one of them is empty, else F1 at IoU >= 0.5 between the
  page's target boxes and ``B_s`` (each target's best IoU over ``B_s`` is a true positive when
  >= 0.5; recall = TP / |targets|, precision = TP / |B_s|);
* ``answer``: the judge's verdict on the final ``<answer>`` (asked only when the format is 1);
* ``format``: 1 when the policy's turns hold complete ``<search>``, ``<select>``,
  ``<information>`` and ``<answer>`` blocks, 0.5 with all but ``<answer>``, else 0.

The total is ``0.6 answer + 0.1 (retrieval + select + crop + format)``, and 0 when the format is
0 (the released gate). Each component is a plain function here; ``UniDocReward`` weighs them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from evidra.core.geometry import iou
from evidra.core.tagscan import find_blocks, first_block
from evidra.core.types import Box, Parsed, Sample, Trajectory
from evidra.env.environment import StepInfo
from evidra.metrics.ranking import vragrl_ndcg
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict, judge_present
from evidra.rewards.reward import REWARDS, RewardResult, check_weights

logger = logging.getLogger(__name__)

COMPONENTS = ("answer", "retrieval", "select", "crop", "format")
WEIGHTS: Mapping[str, float] = {  # released rm.py: 0.6 judge + 0.1 ndcg + 0.1 rerank + 0.1 roi + 0.1 format
    "answer": 0.6,
    "retrieval": 0.1,
    "select": 0.1,
    "crop": 0.1,
    "format": 0.1,
}
IOU_THRESHOLD = 0.5  # released compute_iou_f1
EPS = 1e-8  # released compute_iou_f1's guard against division by zero
RANKS = 3  # released: the top-3 candidates of each search enter the NDCG
FORMAT_TAGS = ("search", "select", "information", "answer")


@dataclass(frozen=True)
class SearchRound:
    """One search of an episode: its candidates, the page kept, the boxes cropped from it."""

    candidates: tuple[str, ...]
    selected: str
    boxes: tuple[Box, ...] = ()


@dataclass
class _Open:
    candidates: tuple[str, ...]
    selected: str
    boxes: list[Box] = field(default_factory=list)


def action_log(infos: Sequence[StepInfo]) -> list[SearchRound]:
    """The searches of an episode from its environment's step infos (``SelectSearchEnv``): a search
    with candidates opens a round, a ``select`` step changes its page, a ``bbox`` step on that page
    adds its crop (page pixels). A search that showed nothing opens no round."""
    rounds: list[_Open] = []
    for info in infos:
        if info.invalid:
            continue
        if info.action == "search" and info.candidates:
            rounds.append(_Open(tuple(info.candidates), info.candidates[0]))
            continue
        current = rounds[-1] if rounds else None
        if current is None or info.page_id is None:
            continue
        if info.action == "select" and info.page_id in current.candidates:
            current.selected = info.page_id
        elif info.action == "bbox" and info.crop is not None and info.page_id == current.selected:
            x1, y1, x2, y2 = info.crop
            current.boxes.append(Box.from_points(float(x1), float(y1), float(x2), float(y2)))
    return [SearchRound(r.candidates, r.selected, tuple(r.boxes)) for r in rounds]


def candidate_order(rounds: Sequence[SearchRound], ranks: int = RANKS) -> list[str]:
    """Rank 1 of every search, then rank 2 of every search, ... each page once (released ndcg).

    >>> candidate_order([SearchRound(("a", "b"), "a"), SearchRound(("c", "a", "d"), "c")])
    ['a', 'c', 'b', 'd']
    """
    order: list[str] = []
    for rank in range(ranks):
        for r in rounds:
            if rank < len(r.candidates) and r.candidates[rank] not in order:
                order.append(r.candidates[rank])
    return order


def retrieval_score(rounds: Sequence[SearchRound], gold_pages: Sequence[str]) -> float:
    """The search reward: NDCG of ``candidate_order`` against the gold pages (0 without either)."""
    return vragrl_ndcg(candidate_order(rounds), gold_pages) if rounds else 0.0


def select_score(rounds: Sequence[SearchRound], gold_pages: Sequence[str]) -> float:
    """The select (rerank) reward: the share of searches whose kept page is the first gold
    candidate (the first candidate when none is gold).

    >>> select_score([SearchRound(("a", "g"), "g"), SearchRound(("b", "c"), "c")], ["g"])
    0.5
    """
    if not rounds:
        return 0.0
    gold = set(gold_pages)
    hits = [r.selected == next((c for c in r.candidates if c in gold), r.candidates[0]) for r in rounds]
    return sum(hits) / len(hits)


def box_f1(targets: Sequence[Box], predicted: Sequence[Box], threshold: float = IOU_THRESHOLD) -> float:
    """The released ROI score of one page: 1 if neither has a box, 0 if one has none, else the F1
    of targets whose best IoU over ``predicted`` reaches ``threshold``.

    >>> box_f1([Box(0, 0, 10, 10)], [Box(0, 0, 10, 10), Box(50, 50, 60, 60)])  # P 1/2, R 1
    0.6666666577777778
    """
    if not targets and not predicted:
        return 1.0
    if not targets or not predicted:
        return 0.0
    tp = sum(max(iou(t, p) for p in predicted) >= threshold for t in targets)
    recall = tp / (len(targets) + EPS)
    precision = tp / (len(predicted) + EPS)
    return 2 * precision * recall / (precision + recall + EPS)


def crop_targets(sample: Sample, page_id: str) -> tuple[Box, ...]:
    """The regions of ``page_id`` that need a crop: the sample's evidence box on it, else its gold
    answer boxes on it; none for any other page (the released ``crop_required`` per page)."""
    if sample.evidence_box is not None and sample.evidence_box.page_id == page_id:
        return (sample.evidence_box.box,)
    return tuple(b.box for b in sample.gold_boxes if b.page_id == page_id)


def crop_score(rounds: Sequence[SearchRound], sample: Sample) -> float:
    """The crop (perception) reward: the mean ``box_f1`` of the searches' kept pages."""
    if not rounds:
        return 0.0
    return sum(box_f1(crop_targets(sample, r.selected), r.boxes) for r in rounds) / len(rounds)


def format_score(policy_turns: Sequence[str]) -> float:
    """1.0 with complete ``<search>``, ``<select>``, ``<information>`` and ``<answer>`` blocks in the
    policy's turns, 0.5 with all but the answer, else 0 (released ``compute_format_reward_only``).

    >>> format_score(["<search>q</search>", "<select>0</select><information>x</information>"])
    0.5
    """
    text = "\n".join(policy_turns)
    has = {tag: first_block(text, f"<{tag}>", f"</{tag}>") is not None for tag in FORMAT_TAGS}
    if has["search"] and has["select"] and has["information"]:
        return 1.0 if has["answer"] else 0.5
    return 0.0


def final_answer(policy_turns: Sequence[str]) -> str | None:
    """Stripped content of the last ``<answer>`` block the policy wrote, or None."""
    for turn in reversed(policy_turns):
        blocks = list(find_blocks(turn, "<answer>", "</answer>"))
        if blocks:
            return blocks[-1].body().strip()
    return None


@dataclass(frozen=True)
class _Prepared:
    values: dict[str, float]
    item: JudgeItem | None  # None: no judge call (no answer, or a format below 1)


class UniDocReward:
    """UniDoc-RL's reward as a ``RewardFn``; the judge is an injected service.

    ``score_steps`` reads the environment's step infos (the candidates, selections and crops);
    called as a plain reward (no infos) the action components are 0. ``score_batch`` judges a
    group in one call; an item whose verdict stays None is ``RewardResult.unscored("judge")``.
    """

    components = COMPONENTS

    def __init__(self, judge: Judge | None = None, weights: Mapping[str, float] | None = None) -> None:
        self.judge = judge if judge is not None else RuleJudge()
        self.weights = check_weights(WEIGHTS if weights is None else weights, COMPONENTS, "unidoc")
        self.unscored_count = 0

    @property
    def component_names(self) -> tuple[str, ...]:
        return COMPONENTS

    def reweighted(self, weights: Mapping[str, float]) -> UniDocReward:
        return UniDocReward(self.judge, {**self.weights, **check_weights(weights, COMPONENTS, "unidoc")})

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_steps(parsed, sample, trajectory, ())

    def score_steps(
        self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None, infos: Sequence[StepInfo]
    ) -> RewardResult:
        return self.score_batch([(parsed, sample, trajectory, tuple(infos))])[0]

    def score_batch(
        self, batch: Sequence[tuple[Parsed, Sample, Trajectory | None, tuple[StepInfo, ...]]]
    ) -> list[RewardResult]:
        prepared = [_prepare(*entry) for entry in batch]
        verdicts = judge_present(self.judge, [p.item for p in prepared])
        return [self._result(p, v) for p, v in zip(prepared, verdicts, strict=True)]

    def _result(self, p: _Prepared, verdict: Verdict) -> RewardResult:
        if verdict.value is None:
            self.unscored_count += 1
            logger.debug("UniDoc-RL item unscored: %s", verdict.error)
            return RewardResult.unscored("judge")
        values = {**p.values, "answer": float(verdict.value)}
        values = {name: values[name] for name in COMPONENTS}
        if values["format"] <= 0:  # released gate: no search, select and information, no reward
            return RewardResult(total=0.0, components=values)
        return RewardResult.weighted(values, self.weights)


def _prepare(
    parsed: Parsed, sample: Sample, trajectory: Trajectory | None, infos: tuple[StepInfo, ...]
) -> _Prepared:
    turns = list(trajectory.texts) if trajectory is not None and trajectory.texts else [parsed.text]
    rounds = action_log(infos)
    fmt = format_score(turns)
    answer = final_answer(turns)
    reference = sample.answers[0] if sample.answers else None
    item = JudgeItem(sample.question, reference, answer) if answer and fmt >= 1.0 else None
    values = {
        "retrieval": retrieval_score(rounds, sample.gold_pages),
        "select": select_score(rounds, sample.gold_pages),
        "crop": crop_score(rounds, sample),
        "format": fmt,
    }
    return _Prepared(values, item)


REWARDS.add("unidoc.total", UniDocReward())
REWARDS.add("unidoc.answer", UniDocReward(weights={"answer": 1.0}))
