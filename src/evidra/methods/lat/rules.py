"""LAT reward equations: accuracy (Eqs. 2-3), format (Eq. 10), grounding (Eq. 9) and
stepwise attribution (Eqs. 4-8), each as the paper writes it and as the released code computes it.

Pure functions of the response text (parsed by ``evidra.methods.lat.parse``) and, for R_step,
the similarity scores of an injected ``Similarity`` service. The two sets of rules are two
registered ``LatRules`` records, ``LAT_RULES["paper"]`` (the equations) and
``LAT_RULES["upstream"]`` (the quirks of ``src/grpo.py`` of PolarisLiu1/LAT, listed in
``evidra.methods.lat.reward`` and docs/rewards.md); no function branches on which one it is.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import regex

from evidra.core.errors import InvalidInputError
from evidra.core.geometry import iou
from evidra.core.registry import Registry
from evidra.core.tagscan import find_blocks
from evidra.core.types import Box, CoordSpace
from evidra.methods.lat.parse import (
    StepPlan,
    answer_text,
    cut_box_lists,
    plan_steps_paper,
    plan_steps_upstream,
    strip_answer_boxes,
    strip_cited_boxes,
    think_text,
)
from evidra.methods.lat.upstream_boxes import (
    lat_box_union,
    lat_iou_train,
    lat_read_json_box,
    py_int,
    py_int_list,
)
from evidra.metrics.text import NO_ANSWER, normalize_lat, soft_exact_match, token_recall
from evidra.rewards.boxes import parse_lat_boxes

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

_FORMAT = regex.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", regex.DOTALL)
_EVAL_BOX_HEAD = regex.compile(r"\nBounding box:\s*\{")  # \nBounding box:\s*\{.*?\}(,\s*\{.*?\})*


class Similarity(Protocol):
    """Retriever similarity of (crop, text) pairs, e.g. ColQwen2 MaxSim (LAT Eqs. 4-6).

    One call scores a whole group, so a model-backed service can batch it.
    """

    def score(self, crops: Sequence[PILImage], texts: Sequence[str]) -> list[float]: ...


@dataclass(frozen=True)
class LatConfig:
    """Constants of LAT Eq. 8-9. The paper states tau=0.3; delta and epsilon are not given in
    the paper text, so the released values (0.5, 0.4) are the defaults."""

    tau: float = 0.3  # similarity threshold S >= tau (Eq. 8)
    delta: float = 0.5  # max pairwise IoU I <= delta (Eq. 8)
    epsilon: float | None = 0.4  # accuracy gate R_acc >= epsilon (Eq. 8); None disables (SA metric)
    ground_iou: float = 0.5  # IoU > 0.5 (Eq. 9)


# ---- accuracy (Eq. 2-3) ---------------------------------------------------------------------


def _acc_upstream(student: str, gold: str) -> float:
    cleaned = normalize_lat(strip_answer_boxes(student))
    gold_n = normalize_lat(gold)
    hit = 0.5 if soft_exact_match(cleaned, gold_n) else 0.0
    return hit + token_recall(cleaned, gold_n) * 0.5


def accuracy_paper(text: str, gold: str, *, answerable: bool = True) -> float:
    """R_acc = (1[EM(a, a_gt)] + Recall(a, a_gt)) / 2 (LAT Eq. 3), in [0, 1]: no answer tag -> 0,
    empty answer -> 0, unanswerable items -> 1 iff the answer says "No answer".

    >>> accuracy_paper("<think>x</think><answer>John Smith</answer>", "John Williams")
    0.25
    >>> accuracy_paper("<answer> </answer>", "Paris")
    0.0
    """
    raw = answer_text(text)
    if raw is None:
        return 0.0
    pred = normalize_lat(strip_cited_boxes(raw), upstream=False)
    if not answerable:
        return 1.0 if NO_ANSWER in pred else 0.0
    gold_n = normalize_lat(gold, upstream=False)
    em = soft_exact_match(pred, gold_n, allow_empty=False)
    return ((1.0 if em else 0.0) + token_recall(pred, gold_n)) / 2


def accuracy_upstream(text: str, gold: str, *, answerable: bool = True) -> float:
    """R_acc as released: a missing tag reads as the literal 'unkonw', an empty answer scores 0.5
    (the empty string is a substring of everything), unanswerable -> 1 iff 'no answer' or 'not'
    occurs in the normalised answer (so "I cannot find it" scores 1).

    >>> accuracy_upstream("<answer> </answer>", "Paris")
    0.5
    """
    raw = answer_text(text)
    student = raw.strip() if raw is not None else "unkonw"
    if not answerable:
        norm = normalize_lat(student)
        return 1.0 if NO_ANSWER in norm or "not" in norm else 0.0
    return _acc_upstream(student, gold)


def eval_accuracy(text: str, gold: str) -> int:
    """LAT evaluation soft EM (``acc_compute``): binary, box citations removed only after a
    newline, an empty prediction matches (upstream evaluation behaviour, kept for comparability)."""
    raw = answer_text(text)
    student = raw.strip() if raw is not None else "unknown"
    cleaned = cut_box_lists(student, _EVAL_BOX_HEAD).strip().strip(".")
    return 1 if soft_exact_match(normalize_lat(cleaned), normalize_lat(gold)) else 0


# ---- format (Eq. 10) ------------------------------------------------------------------------


def format_reward(text: str) -> float:
    """R_format = +1 if the stripped text is exactly ``<think>..</think>\\s*<answer>..</answer>``,
    else -1 (LAT Eq. 10; same in both modes).

    >>> format_reward("<think>a</think>\\n<answer>b</answer>")
    1.0
    >>> format_reward("x<think>a</think><answer>b</answer>")
    -1.0
    """
    body = text.strip()
    # checked first: with both ends fixed, the lazy groups of _FORMAT backtrack in linear time
    ends = body.startswith("<think>") and body.endswith("</answer>")
    return 1.0 if ends and _FORMAT.fullmatch(body) else -1.0


# ---- grounding (Eq. 9) ----------------------------------------------------------------------


def _ground_upstream(text: str, gold_box: Sequence[float], gold_page: int) -> float:
    answer_m, think_m = answer_text(text), think_text(text)
    answer = answer_m if answer_m is not None and think_m is not None else "Error"
    think = think_m if answer_m is not None and think_m is not None else "Error"
    spans = [b.group() for b in find_blocks(answer.replace("'", '"'), "{", "}", dotall=False)]  # \{.*?\}
    if not spans:
        return 0.0
    hits: list[bool] = []
    for span in spans:
        parsed = lat_read_json_box(span)
        coords, index = py_int_list(parsed.bbox), py_int(parsed.image_index)
        if parsed.status != "ok" or coords is None or index is None:
            return 0.0  # upstream: the exception leaves the reward at 0
        if len(coords) == 4 and (len(gold_box) < 4 or lat_box_union(coords, gold_box) == 0):
            return 0.0  # upstream: IndexError / ZeroDivisionError inside iou()
        hits.append(lat_iou_train(coords, gold_box) > 0.5 and index - 1 == gold_page)
    all_right = all(span in think for span in spans)
    reward = 1.0 if any(hits) and all_right else 0.0
    norm = normalize_lat(answer)
    if gold_page == -1 and (NO_ANSWER in norm or "not" in norm):
        reward = 1.0
    return reward


def ground_upstream(
    text: str, gold_box: Sequence[float] | None, gold_page: int | None, config: LatConfig = LatConfig()
) -> float:
    """R_ground as released: any answer box counts, but only if every answer box JSON also
    appears verbatim in <think> (the ``lat_iou_reward`` contract); IoU > 0.5 is fixed."""
    unanswerable = gold_page is None or gold_page == -1
    return _ground_upstream(text, gold_box or (), -1 if unanswerable else int(gold_page or 0))


def ground_paper(
    text: str, gold_box: Sequence[float] | None, gold_page: int | None, config: LatConfig = LatConfig()
) -> float:
    """R_ground = 1[IoU(B_ans, B_gt) > 0.5] s.t. i* = i_gt (LAT Eq. 9), in {0, 1}.

    ``gold_box`` is ``[x1, y1, x2, y2]`` in page pixels, ``gold_page`` 0-based; ``gold_page=None``
    (or -1) marks an unanswerable item. The FIRST box of the answer is B_ans, and it must be one
    of the boxes the reasoning cites (B_ans in the set of step boxes: the model selects its
    evidence from the chain, LAT Sec. 3.3); unanswerable -> 1 iff the answer says "No answer".

    >>> box = 'Bounding box: {"bbox_2d": [0, 0, 10, 10], "Image_index": 1}'
    >>> ground_paper(f"<think>s. {box}</think><answer>X {box}</answer>", [0, 0, 10, 19], 0)
    1.0
    >>> ground_paper(f"<think>s.</think><answer>X {box}</answer>", [0, 0, 10, 19], 0)  # not cited
    0.0
    """
    raw = answer_text(text)
    if raw is None:
        return 0.0
    if gold_page is None or gold_page == -1:
        return 1.0 if NO_ANSWER in normalize_lat(raw, upstream=False) else 0.0
    boxes = parse_lat_boxes(raw, CoordSpace.PAGE)
    if not boxes or gold_box is None or len(gold_box) != 4:
        return 0.0
    first = boxes[0]
    if not first.ok or first.box is None or first.page_index != gold_page:
        return 0.0
    think = think_text(text)
    cited = parse_lat_boxes(think, CoordSpace.PAGE) if think is not None else []
    if not any(c.ok and c.page_index == first.page_index and c.box == first.box for c in cited):
        return 0.0  # B_ans must be one of the reasoning's boxes
    gx1, gy1, gx2, gy2 = (float(v) for v in gold_box)
    if gx2 < gx1 or gy2 < gy1:
        return 0.0
    return 1.0 if iou(first.box, Box(gx1, gy1, gx2, gy2)) > config.ground_iou else 0.0


# ---- stepwise attribution (Eqs. 4-8) ----------------------------------------------------------


def score_plans(plans: Sequence[StepPlan], similarity: Similarity) -> list[list[float]]:
    """Similarity of every scorable step of every plan, in ONE service call (a group)."""
    pairs = [pair for plan in plans for pair in plan.queries]
    flat = similarity.score([p[0] for p in pairs], [p[1] for p in pairs]) if pairs else []
    if len(flat) != len(pairs):
        raise InvalidInputError(
            f"similarity service returned {len(flat)} scores for {len(pairs)} (crop, text) pairs; "
            "it must return one score per pair"
        )
    out: list[list[float]] = []
    pos = 0
    for plan in plans:
        scores: list[float] = []
        for step in plan.steps:
            if step.crop is not None:
                scores.append(float(flat[pos]))
                pos += 1
            else:
                scores.append(0.0)
        out.append(scores)
    return out


def _max_same_page_iou(plan: StepPlan, overlap: Callable[[Sequence[float], Sequence[float]], float]) -> float:
    scored = [s for s in plan.steps if s.crop is not None and s.box is not None]
    best = 0.0
    for j, cur in enumerate(scored):
        for prev in scored[:j]:
            if prev.page_key != cur.page_key or prev.box is None or cur.box is None:
                continue
            best = max(best, overlap(prev.box, cur.box))
    return best


def _iou_paper(a: Sequence[float], b: Sequence[float]) -> float:
    return iou(Box(a[0], a[1], a[2], a[3]), Box(b[0], b[1], b[2], b[3]))


def step_paper(
    plan: StepPlan,
    scores: Sequence[float],
    text: str,
    gold: str,
    *,
    answerable: bool = True,
    config: LatConfig = LatConfig(),
) -> float:
    """R_step from a plan and its similarity scores (LAT Eq. 8), in [0, 1]:
    (1[min cos >= tau] + 1[max IoU <= delta]) / 2 * 1[R_acc >= epsilon], K >= 1 steps.
    Unanswerable: 1 iff the answer says "no answer"."""
    if not plan.has_think or plan.aborted:
        return 0.0
    if not answerable:
        raw = answer_text(text)
        return 1.0 if NO_ANSWER in normalize_lat(raw or "", upstream=False) else 0.0
    if not plan.steps:
        return 0.0
    max_iou = _max_same_page_iou(plan, _iou_paper)
    reward = ((1.0 if min(scores) >= config.tau else 0.0) + (1.0 if max_iou <= config.delta else 0.0)) / 2
    if config.epsilon is not None and accuracy_paper(text, gold) < config.epsilon:
        return 0.0
    return reward


def step_upstream(
    plan: StepPlan,
    scores: Sequence[float],
    text: str,
    gold: str,
    *,
    answerable: bool = True,
    config: LatConfig = LatConfig(),
) -> float:
    """R_step as released: 0.5 iff min score > tau and >= 2 steps, +0.5 iff additionally no
    same-page pair has IoU >= delta; gated on the released R_acc; unanswerable: 1 iff the answer
    (or 'unknown' without one) says "no answer"."""
    if not plan.has_think or plan.aborted:
        return 0.0
    raw = answer_text(text)
    if not answerable:
        return 1.0 if NO_ANSWER in normalize_lat(raw if raw is not None else "unknown") else 0.0
    max_iou = _max_same_page_iou(plan, lat_iou_train)
    reward = 0.5 if (min(scores) if scores else 0) > config.tau and len(plan.steps) > 1 else 0.0
    if reward == 0.5 and max_iou < config.delta:
        reward += 0.5
    acc = _acc_upstream(raw if raw is not None else "unknown", gold)
    if config.epsilon is not None and acc < config.epsilon:
        return 0.0
    return reward


Planner = Callable[..., StepPlan]  # (text, pages, *, single_image) -> StepPlan


@dataclass(frozen=True)
class LatRules:
    """One variant of LAT's rules: how steps are cut from the response and how each reward reads it."""

    name: str
    plan: Planner
    accuracy: Callable[..., float]  # (text, gold, *, answerable) -> R_acc
    ground: Callable[..., float]  # (text, gold_box, gold_page, config) -> R_ground
    step: Callable[..., float]  # (plan, scores, text, gold, *, answerable, config) -> R_step


LAT_RULES: Registry[LatRules] = Registry("LAT reward rules")
PAPER = LatRules("paper", plan_steps_paper, accuracy_paper, ground_paper, step_paper)
UPSTREAM = LatRules("upstream", plan_steps_upstream, accuracy_upstream, ground_upstream, step_upstream)
LAT_RULES.add("paper", PAPER)
LAT_RULES.add("upstream", UPSTREAM)


def step_reward(
    text: str,
    gold: str,
    pages: Sequence[PILImage | None],
    similarity: Similarity,
    *,
    answerable: bool = True,
    single_image: bool = False,
    rules: LatRules = PAPER,
    config: LatConfig = LatConfig(),
) -> float:
    """R_step of one response (LAT Eq. 8) under ``rules``; ``pages`` are the candidate page
    images in prompt order (``single_image``: every box refers to ``pages[0]``, as in LAT's
    single-image mode)."""
    plan = rules.plan(text, pages, single_image=single_image)
    (scores,) = score_plans([plan], similarity)
    return rules.step(plan, scores, text, gold, answerable=answerable, config=config)


def stepwise_attribution(
    text: str, pages: Sequence[PILImage | None], similarity: Similarity, *, single_image: bool = False
) -> float:
    """SA evaluation metric: R_step (paper Eq. 8, tau = 0.3) without the accuracy gate."""
    cfg = LatConfig(epsilon=None)
    return step_reward(text, "", pages, similarity, single_image=single_image, config=cfg)
