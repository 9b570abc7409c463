"""Per-sample scores of one prediction: the benchmark's official metric plus the papers' metrics.

``Prediction`` is what a run produced for one sample (the JSONL cache row of the runner); every
box in it is already in page pixels. ``score`` returns a flat ``{metric: value}``:

* the official answer metric of the sample's benchmark (``evidra.metrics.official``, registered
  per dataset name), e.g. ``anls`` for DocVQA, ``relaxed_accuracy`` for ChartQA;
* LAT's soft ``em`` and ``iou50`` (answer box on the gold page with IoU > 0.5; an unanswerable
  item counts when the answer says "No answer" and gives no box, the VISA rule; LAT §5.1);
* EVisRAG's ``evisrag_acc`` / ``evisrag_f1`` against "insufficient to answer" when the sample's
  context is insufficient (EVisRAG Eq. 12, ``src/evisrag/eval.py``);
* retrieval ``recall@k``, ``mrr@10``, ``ndcg@k`` when the episode retrieved pages;
* process statistics from the environment infos (``process``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import iou
from evidra.core.types import Box, Sample
from evidra.env.environment import StepInfo
from evidra.metrics.official import official
from evidra.metrics.qa import evaluate_predictions
from evidra.metrics.ranking import mrr_at_k, ndcg_at_k, recall_at_k
from evidra.metrics.text import (
    INSUFFICIENT_ANSWER,
    is_no_answer,
    normalize_lat,
    soft_exact_match,
)
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict

PageBox = tuple[float, float, float, float]


@dataclass(frozen=True)
class StepBox:
    """One reasoning step (or zoom) with the box it cited, for scoring and the viewer."""

    text: str
    page: int | None  # 0-based index into the sample's pages
    box: PageBox | None  # page pixels


@dataclass(frozen=True)
class Prediction:
    """What one run produced for one sample; serialised as a JSONL cache row."""

    sample_id: str
    texts: tuple[str, ...]  # the policy's text, one entry per turn
    answer: str | None
    answer_page: int | None = None  # 0-based
    answer_box: PageBox | None = None
    steps: tuple[StepBox, ...] = ()
    infos: tuple[StepInfo, ...] = ()
    errors: tuple[str, ...] = ()
    n_tokens: int = 0
    latency_s: float = 0.0
    finished: bool = True
    scores: Mapping[str, float] = field(default_factory=dict)


IOU50_THRESHOLD = 0.5  # LAT §5.1: the share of answer boxes whose IoU "exceeds 0.5" (strictly, as Eq. 9)


def lat_scores(sample: Sample, pred: str, p: Prediction) -> dict[str, float]:
    """LAT's soft EM and IoU@0.5 (LAT §5.1; VISA's box rule for unanswerable items): a box at
    exactly IoU 0.5 does not count."""
    golds = sample.answers if sample.answerable else ("No answer",)
    em = any(soft_exact_match(normalize_lat(pred), normalize_lat(g), allow_empty=False) for g in golds)
    if not sample.answerable:
        return {"em": float(is_no_answer(pred)), "iou50": float(is_no_answer(pred) and p.answer_box is None)}
    hit = False
    if p.answer_box is not None and p.answer_page is not None and 0 <= p.answer_page < len(sample.pages):
        page_id = sample.pages[p.answer_page].id
        box = Box.from_points(*p.answer_box)
        hit = any(g.page_id == page_id and iou(box, g.box) > IOU50_THRESHOLD for g in sample.gold_boxes)
    return {"em": float(em), "iou50": float(hit)} if sample.gold_boxes else {"em": float(em)}


def evisrag_scores(sample: Sample, pred: str) -> dict[str, float]:
    """EVisRAG Acc / F1; the gold is "insufficient to answer" for insufficient context."""
    insufficient = sample.sufficient is False or not sample.answerable
    golds = [INSUFFICIENT_ANSWER] if insufficient else list(sample.answers)
    m = evaluate_predictions(pred, golds)
    return {"evisrag_acc": float(m["acc"]), "evisrag_f1": float(m["f1"])}


def retrieved_ids(infos: Sequence[StepInfo]) -> list[str]:
    """Every page id the episode retrieved, first occurrence first (``StepInfo.retrieved``)."""
    seen: list[str] = []
    for info in infos:
        for pid in info.retrieved:
            if pid not in seen:
                seen.append(pid)
    return seen


def retrieval_scores(
    sample: Sample, infos: Sequence[StepInfo], ks: Sequence[int] = (1, 5)
) -> dict[str, float]:
    ranking = retrieved_ids(infos)
    if not ranking or not sample.gold_pages:
        return {}
    qrels = dict(sample.qrels) or list(sample.gold_pages)
    out = {f"recall@{k}": recall_at_k(ranking, qrels, k) for k in ks}
    out.update({f"ndcg@{k}": ndcg_at_k(ranking, qrels, k) for k in ks})
    out["mrr@10"] = mrr_at_k(ranking, qrels, 10)
    return out


NOT_TOOL_CALLS = frozenset({"", "answer", "invalid", "none"})
ZOOM_ACTIONS = frozenset({"zoom", "crop", "bbox"})  # evidra.env.zoom ("zoom"), evidra.env.search ("bbox")


def _useful_zoom(sample: Sample, info: StepInfo) -> bool:
    """A zoom is useful when its region (``crop``, page pixels) overlaps a gold box on the zoomed
    page (``page_id``; the only page when a single page is shown)."""
    box, page = info.crop, info.page_id
    if page is None and len(sample.pages) == 1:
        page = sample.pages[0].id
    if box is None or page is None:
        return False
    b = Box.from_points(*box)
    return any(g.page_id == page and iou(b, g.box) > 0 for g in sample.gold_boxes)


def process(sample: Sample, p: Prediction) -> dict[str, float]:
    """Invalid-action rate, finish, turns, tool calls, useful-zoom rate, tokens, latency."""
    actions = [i.action for i in p.infos]
    zooms = [i for i in p.infos if i.action in ZOOM_ACTIONS]
    out = {
        "invalid_rate": sum(a == "invalid" for a in actions) / len(actions) if actions else 0.0,
        "finished": float(p.finished),
        "turns": float(len(p.texts)),
        "tool_calls": float(sum(a not in NOT_TOOL_CALLS for a in actions)),
        "tokens": float(p.n_tokens),
        "latency_s": p.latency_s,
        "format_ok": float(not p.errors),
    }
    if zooms:
        out["useful_zoom_rate"] = sum(_useful_zoom(sample, z) for z in zooms) / len(zooms)
    return out


ExtraScorer = Callable[[Sample, Prediction], dict[str, float]]


JUDGE_UNSCORED = "judge_unscored"  # 1 when the judge could not score the answer; summed in tables


def _judge_item(sample: Sample, p: Prediction) -> JudgeItem | Verdict:
    """What to ask the judge, or the verdict without asking (no reference: unscored; no answer: wrong)."""
    reference = sample.answers[0] if sample.answers else None
    if reference is None or not reference.strip():
        return Verdict(None, "no reference answer")
    if not (p.answer or "").strip():
        return Verdict(False)
    return JudgeItem(sample.question, reference, p.answer or "")


def _judged(verdict: Verdict) -> dict[str, float]:
    if verdict.value is None:
        return {JUDGE_UNSCORED: 1.0}
    return {"judge_accuracy": float(verdict.value), JUDGE_UNSCORED: 0.0}


def judge_scores(
    judge: Judge, samples: Sequence[Sample], predictions: Sequence[Prediction]
) -> list[dict[str, float]]:
    """``judge_accuracy`` (0/1) and ``judge_unscored`` of each prediction, the answers of all of
    them sent to ``judge`` in ONE call (an endpoint judge then runs its requests concurrently).

    An unscored item (judge error after its retries, unparseable reply, no reference) gets no
    ``judge_accuracy``, so it stays out of the accuracy's mean, and ``judge_unscored`` 1.

    >>> from evidra.rewards.judge import RuleJudge
    >>> s = [Sample(id="a", question="Q", answers=("Paris",)), Sample(id="b", question="Q")]
    >>> judge_scores(RuleJudge(), s, [Prediction("a", (), "Paris"), Prediction("b", (), "x")])
    [{'judge_accuracy': 1.0, 'judge_unscored': 0.0}, {'judge_unscored': 1.0}]
    """
    asks = [_judge_item(s, p) for s, p in zip(samples, predictions, strict=True)]
    items = [a for a in asks if isinstance(a, JudgeItem)]
    verdicts = judge.judge(items) if items else []
    if len(verdicts) != len(items):
        raise InvalidInputError(f"the judge returned {len(verdicts)} verdicts for {len(items)} answers")
    given = iter(verdicts)
    return [_judged(next(given) if isinstance(a, JudgeItem) else a) for a in asks]


def judge_scorer(judge: Judge) -> ExtraScorer:
    """``judge_scores`` one sample at a time, as an ``ExtraScorer`` of ``run_eval`` (the scores
    are then cached with the predictions; ``evidra eval --judge`` uses ``judge_scores``)."""

    def judged(sample: Sample, p: Prediction) -> dict[str, float]:
        return judge_scores(judge, [sample], [p])[0]

    return judged


def score(sample: Sample, p: Prediction, extra: Sequence[ExtraScorer] = ()) -> dict[str, float]:
    """Every per-sample score of ``p`` (see the module docstring) plus the ``extra`` scorers'."""
    pred = p.answer if p.answer is not None else ""
    out = official(sample, pred, p.answer_page)
    out.update(lat_scores(sample, pred, p))
    out.update(evisrag_scores(sample, pred))
    out.update(retrieval_scores(sample, p.infos))
    out.update(process(sample, p))
    for scorer in extra:
        out.update(scorer(sample, p))
    return out
