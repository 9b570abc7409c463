"""LAT (Look As You Think, Chain-of-Evidence) rewards: accuracy, stepwise attribution,
grounding and format (LAT Eqs. 2-10), in ``paper`` and ``upstream`` modes.

Output format: ``<think>step. Bounding box: {"bbox_2d": [x1,y1,x2,y2], "Image_index": k} ...
</think><answer>ans Bounding box: {...}</answer>``; boxes are pixels of the ORIGINAL page.

``upstream`` reproduces ``src/grpo.py`` of PolarisLiu1/LAT (the conformance contract),
including its quirks: an empty prediction scores 0.5 (empty string is a substring of
everything), the 'unkonw' literal, 'not' counting as "no answer", strict in-page bounds, at
least two steps for R_step. ``paper`` follows the equations; see docs/rewards.md for every
difference. The retriever similarity of R_step is an injected ``Similarity`` service.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

import regex

from evidra.errors import InvalidInputError
from evidra.geometry import iou, is_valid_box
from evidra.rewards.base import REWARDS, RewardResult
from evidra.rewards.boxes import (
    extract_tag,
    lat_box_union,
    lat_iou_train,
    lat_read_json_box,
    parse_lat_boxes,
    py_int,
    py_int_list,
)
from evidra.rewards.text import NO_ANSWER, normalize_lat, soft_exact_match, token_recall
from evidra.types import Box, CoordSpace, Page, Parsed, Sample, Trajectory

if TYPE_CHECKING:
    from PIL.Image import Image as PILImage

logger = logging.getLogger(__name__)

Mode = Literal["paper", "upstream"]

_ANSWER = regex.compile(r"<answer>(.*?)</answer>", regex.DOTALL)
_THINK = regex.compile(r"<think>(.*?)</think>", regex.DOTALL)
_FORMAT = regex.compile(r"<think>(.*?)</think>\s*<answer>(.*?)</answer>", regex.DOTALL)
_ANSWER_BOXES = regex.compile(r"Bounding box:\s*\{.*?\}(,\s*\{.*?\})*")
_EVAL_ANSWER_BOXES = regex.compile(r"\nBounding box:\s*\{.*?\}(,\s*\{.*?\})*")
_STEP_SOURCE = regex.compile(r"Bounding box:\s*(\{.*?\})")
_SENTENCE_SPLIT = regex.compile(r"\. |\n")
_JSON_SPAN = regex.compile(r"\{.*?\}")
_BOX_LABEL = regex.compile(r"bounding\s*box\s*:?\s*$", regex.IGNORECASE)
_BOX_LABELS = regex.compile(r"bounding\s*box(?:es)?\s*:?|,\s*(?=,|$)", regex.IGNORECASE)
MAX_CROP_ASPECT = 200  # ColQwen2's processor rejects thinner crops; upstream resizes them


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


def answer_text(text: str) -> str | None:
    """First ``<answer>...</answer>`` content (DOTALL), unstripped; None if absent."""
    m = _ANSWER.search(text)
    return m.group(1) if m else None


def strip_answer_boxes(answer: str) -> str:
    """The answer without its ``Bounding box: {..}(, {..})*`` citations, stripped of spaces/dots."""
    return _ANSWER_BOXES.sub("", answer).strip().strip(".")


def strip_cited_boxes(answer: str) -> str:
    """Paper mode: the answer without any LAT box in any accepted syntax, nor "Bounding box:"
    labels (case-insensitive), stripped of spaces and dots.

    >>> strip_cited_boxes("Paris.\\nbounding box: (bbox_2d: (1, 2, 3, 4), Image_index: 1)")
    'Paris'
    """
    kept, pos = [], 0
    for parsed in parse_lat_boxes(answer):
        kept.append(answer[pos : parsed.start])
        pos = parsed.end
    kept.append(answer[pos:])
    return _BOX_LABELS.sub(" ", "".join(kept)).strip().strip(".").strip()


def _acc_upstream(student: str, gold: str) -> float:
    cleaned = normalize_lat(strip_answer_boxes(student))
    gold_n = normalize_lat(gold)
    hit = 0.5 if soft_exact_match(cleaned, gold_n) else 0.0
    return hit + token_recall(cleaned, gold_n) * 0.5


def accuracy_reward(text: str, gold: str, *, answerable: bool = True, mode: Mode = "paper") -> float:
    """R_acc = (1[EM(a, a_gt)] + Recall(a, a_gt)) / 2 (LAT Eq. 3), in [0, 1].

    paper: no answer tag -> 0; empty answer -> 0; unanswerable items -> 1 iff the answer says
    "No answer". upstream: missing tag -> literal 'unkonw', empty answer -> 0.5, unanswerable ->
    1 iff 'no answer' or 'not' occurs in the normalised answer (so "I cannot find it" scores 1).

    >>> accuracy_reward("<think>x</think><answer>John Smith</answer>", "John Williams")
    0.25
    >>> empty = "<answer> </answer>"
    >>> accuracy_reward(empty, "Paris"), accuracy_reward(empty, "Paris", mode="upstream")
    (0.0, 0.5)
    """
    raw = answer_text(text)
    if mode == "upstream":
        student = raw.strip() if raw is not None else "unkonw"
        if not answerable:
            norm = normalize_lat(student)
            return 1.0 if NO_ANSWER in norm or "not" in norm else 0.0
        return _acc_upstream(student, gold)
    if raw is None:
        return 0.0
    pred = normalize_lat(strip_cited_boxes(raw), upstream=False)
    if not answerable:
        return 1.0 if NO_ANSWER in pred else 0.0
    gold_n = normalize_lat(gold, upstream=False)
    em = soft_exact_match(pred, gold_n, allow_empty=False)
    return ((1.0 if em else 0.0) + token_recall(pred, gold_n)) / 2


def eval_accuracy(text: str, gold: str) -> int:
    """LAT evaluation soft EM (``acc_compute``): binary, box citations removed only after a
    newline, an empty prediction matches (upstream evaluation behaviour, kept for comparability)."""
    m = _ANSWER.search(text)
    student = m.group(1).strip() if m else "unknown"
    cleaned = _EVAL_ANSWER_BOXES.sub("", student).strip().strip(".")
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
    return 1.0 if _FORMAT.fullmatch(text.strip()) else -1.0


# ---- grounding (Eq. 9) ----------------------------------------------------------------------


def _ground_upstream(text: str, gold_box: Sequence[float], gold_page: int) -> float:
    answer_m, think_m = _ANSWER.search(text), _THINK.search(text)
    answer = answer_m.group(1) if answer_m and think_m else "Error"
    think = think_m.group(1) if answer_m and think_m else "Error"
    spans = _JSON_SPAN.findall(answer.replace("'", '"'))
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


def ground_reward(
    text: str,
    gold_box: Sequence[float] | None,
    gold_page: int | None,
    *,
    mode: Mode = "paper",
    config: LatConfig = LatConfig(),
) -> float:
    """R_ground = 1[IoU(B_ans, B_gt) > 0.5] s.t. i* = i_gt (LAT Eq. 9), in {0, 1}.

    ``gold_box`` is ``[x1, y1, x2, y2]`` in page pixels, ``gold_page`` 0-based; ``gold_page=None``
    (or -1) marks an unanswerable item. paper: the FIRST box of the answer is B_ans; unanswerable
    -> 1 iff the answer says "No answer". upstream: any answer box counts, but only if every
    answer box JSON also appears verbatim in <think>; see ``lat_iou_reward`` contract.

    >>> box = 'Bounding box: {"bbox_2d": [0, 0, 10, 10], "Image_index": 1}'
    >>> ground_reward(f"<think>s. {box}</think><answer>X {box}</answer>", [0, 0, 10, 19], 0)
    1.0
    """
    unanswerable = gold_page is None or gold_page == -1
    if mode == "upstream":
        return _ground_upstream(text, gold_box or (), -1 if unanswerable else int(gold_page or 0))
    raw = answer_text(text)
    if raw is None:
        return 0.0
    if unanswerable:
        return 1.0 if NO_ANSWER in normalize_lat(raw, upstream=False) else 0.0
    boxes = parse_lat_boxes(raw, CoordSpace.PAGE)
    if not boxes or gold_box is None or len(gold_box) != 4:
        return 0.0
    first = boxes[0]
    if not first.ok or first.box is None or first.page_index != gold_page:
        return 0.0
    gx1, gy1, gx2, gy2 = (float(v) for v in gold_box)
    if gx2 < gx1 or gy2 < gy1:
        return 0.0
    return 1.0 if iou(first.box, Box(gx1, gy1, gx2, gy2)) > config.ground_iou else 0.0


# ---- stepwise attribution (Eqs. 4-8) ----------------------------------------------------------


@dataclass(frozen=True)
class StepCitation:
    """One reasoning step r_t with its cited box: what is scored against what.

    ``crop`` is None when the step cannot be scored (bad box, wrong page, empty text); such a
    step counts with similarity 0. ``page_key`` is the page identity used for the overlap test
    (upstream: the raw JSON ``Image_index`` value, compared with Python ``==``).
    """

    text: str
    box: tuple[float, float, float, float] | None
    page_key: object
    crop: PILImage | None
    error: str | None = None


@dataclass(frozen=True)
class StepPlan:
    """The steps of one response, before similarity scoring. ``aborted``: upstream raised
    mid-way (a box without a bbox_2d/Image_index key); the reward is then 0 whatever the scores."""

    steps: tuple[StepCitation, ...]
    has_think: bool
    aborted: bool = False

    @property
    def queries(self) -> list[tuple[PILImage, str]]:
        return [(s.crop, s.text) for s in self.steps if s.crop is not None]


def _fit_aspect(crop: PILImage) -> PILImage | None:
    """Resize a crop thinner than 1:200 to 200 px on its long side, as upstream does."""
    w, h = crop.size
    if min(w, h) == 0:
        return None
    if max(w, h) / min(w, h) <= MAX_CROP_ASPECT:
        return crop
    size = (int(w * 200 / h), 200) if h > w else (200, int(h * 200 / w))
    return crop.resize(size) if min(size) > 0 else None


def _crop_upstream(page: PILImage | None, coords: list[int] | None) -> tuple[PILImage | None, str | None]:
    if page is None:
        return None, "page image unavailable"
    if coords is None or len(coords) != 4:
        return None, "bbox is not 4 integers"
    x1, y1, x2, y2 = coords
    w, h = page.size
    if x2 < x1 or y2 < y1:
        return None, "inverted box"
    if not (x1 > 0 and y1 > 0 and x2 < w and y2 < h):
        return None, "box not strictly inside the page"
    return _fit_aspect(page.crop((x1, y1, x2, y2))), None


def _pick_page(pages: Sequence[PILImage | None], index: object, single_image: bool) -> PILImage | None:
    if single_image:
        return pages[0] if pages else None
    k = py_int(index)
    if k is None or not -len(pages) <= k - 1 < len(pages):
        return None
    return pages[k - 1]  # upstream indexes candidates[k - 1]: k = 0 wraps to the last page


def plan_steps_upstream(text: str, pages: Sequence[PILImage | None], *, single_image: bool) -> StepPlan:
    """Segment <think> at each ``Bounding box: {..}`` as ``step_reward`` in LAT's grpo.py does:
    the query is the last '. '- or newline-separated piece of text since the previous box."""
    think_m = _THINK.search(text)
    if think_m is None:
        return StepPlan((), has_think=False)
    think = think_m.group(1)
    steps: list[StepCitation] = []
    previous_end = 0
    for m in _STEP_SOURCE.finditer(think):
        query = _SENTENCE_SPLIT.split(think[previous_end : m.start()].strip())[-1].strip()
        previous_end = m.end()
        parsed = lat_read_json_box(m.group(1))
        if parsed.status in ("key", "fatal"):
            logger.debug("LAT step box %r aborts the reward (upstream KeyError)", m.group(1))
            return StepPlan(tuple(steps), has_think=True, aborted=True)
        coords = py_int_list(parsed.bbox) if parsed.status == "ok" and parsed.bbox is not None else None
        crop, error = _crop_upstream(_pick_page(pages, parsed.image_index, single_image), coords)
        if crop is not None and not query:
            crop, error = None, "empty step text"
        box = tuple(float(c) for c in coords) if coords is not None and len(coords) == 4 else None
        steps.append(StepCitation(query, box, parsed.image_index, crop, error))  # type: ignore[arg-type]
    return StepPlan(tuple(steps), has_think=True)


def plan_steps_paper(text: str, pages: Sequence[PILImage | None], *, single_image: bool) -> StepPlan:
    """Segment <think> into steps r_t, each ending at a cited box (B_t, i_t) (LAT Eq. 1).

    r_t is the whole text since the previous box (minus the "Bounding box:" label). A step is
    scored only if its box parses, its page exists and it lies inside the page (non-strict).
    """
    think = extract_tag(text, "think")
    if think is None:
        return StepPlan((), has_think=False)
    steps: list[StepCitation] = []
    previous_end = 0
    for parsed in parse_lat_boxes(think, CoordSpace.PAGE):
        segment = _BOX_LABEL.sub("", think[previous_end : parsed.start].rstrip()).strip()
        previous_end = parsed.end
        page_index = 0 if single_image and parsed.page_index in (None, 0) else parsed.page_index
        page = pages[page_index] if page_index is not None and 0 <= page_index < len(pages) else None
        crop, error = None, parsed.error
        if parsed.ok and parsed.box is not None and page is not None:
            if is_valid_box(parsed.box, *page.size) and segment:
                b = parsed.box
                crop = _fit_aspect(page.crop((round(b.x1), round(b.y1), round(b.x2), round(b.y2))))
                error = None if crop is not None else "box has no area in pixels"
            else:
                error = "box outside the page or empty step text"
        elif error is None:
            error = "page image unavailable"
        box = parsed.box.as_tuple() if parsed.box is not None else None
        steps.append(StepCitation(segment, box, page_index, crop, error))
    return StepPlan(tuple(steps), has_think=True)


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


def _max_same_page_iou(plan: StepPlan, mode: Mode) -> float:
    scored = [s for s in plan.steps if s.crop is not None and s.box is not None]
    best = 0.0
    for j, cur in enumerate(scored):
        for prev in scored[:j]:
            if prev.page_key != cur.page_key or prev.box is None or cur.box is None:
                continue
            value = (
                lat_iou_train(prev.box, cur.box) if mode == "upstream" else iou(Box(*prev.box), Box(*cur.box))
            )
            best = max(best, value)
    return best


def finish_step_reward(
    plan: StepPlan,
    scores: Sequence[float],
    text: str,
    gold: str,
    *,
    answerable: bool = True,
    mode: Mode = "paper",
    config: LatConfig = LatConfig(),
) -> float:
    """R_step from a plan and its similarity scores (LAT Eq. 8), in [0, 1].

    paper: (1[min cos >= tau] + 1[max IoU <= delta]) / 2 * 1[R_acc >= epsilon], K >= 1 steps.
    upstream: 0.5 iff min score > tau and >= 2 steps, +0.5 iff additionally no same-page pair
    has IoU >= delta; gate on the upstream R_acc. Unanswerable: 1 iff the answer says "no answer".
    """
    if not plan.has_think or plan.aborted:
        return 0.0
    raw = answer_text(text)
    if not answerable:
        student = raw if raw is not None else ("unknown" if mode == "upstream" else "")
        return 1.0 if NO_ANSWER in normalize_lat(student, upstream=mode == "upstream") else 0.0
    max_iou = _max_same_page_iou(plan, mode)
    if mode == "upstream":
        reward = 0.5 if (min(scores) if scores else 0) > config.tau and len(plan.steps) > 1 else 0.0
        if reward == 0.5 and max_iou < config.delta:
            reward += 0.5
        acc = _acc_upstream(raw if raw is not None else "unknown", gold)
    else:
        if not plan.steps:
            return 0.0
        reward = ((1.0 if min(scores) >= config.tau else 0.0) + (1.0 if max_iou <= config.delta else 0.0)) / 2
        acc = accuracy_reward(text, gold, mode="paper")
    if config.epsilon is not None and acc < config.epsilon:
        return 0.0
    return reward


def step_reward(
    text: str,
    gold: str,
    pages: Sequence[PILImage | None],
    similarity: Similarity,
    *,
    answerable: bool = True,
    single_image: bool = False,
    mode: Mode = "paper",
    config: LatConfig = LatConfig(),
) -> float:
    """R_step of one response (LAT Eq. 8); ``pages`` are the candidate page images in prompt
    order (``single_image``: every box refers to ``pages[0]``, as in LAT's single-image mode)."""
    plan = (plan_steps_upstream if mode == "upstream" else plan_steps_paper)(
        text, pages, single_image=single_image
    )
    (scores,) = score_plans([plan], similarity)
    return finish_step_reward(plan, scores, text, gold, answerable=answerable, mode=mode, config=config)


def stepwise_attribution(
    text: str, pages: Sequence[PILImage | None], similarity: Similarity, *, single_image: bool = False
) -> float:
    """SA evaluation metric: R_step (paper Eq. 8, tau = 0.3) without the accuracy gate."""
    cfg = LatConfig(epsilon=None)
    return step_reward(text, "", pages, similarity, single_image=single_image, config=cfg)


# ---- RewardFn wrappers -------------------------------------------------------------------------

_COMPONENTS = ("accuracy", "step", "ground", "format")


@dataclass(frozen=True)
class LatReward:
    """LAT reward as a ``RewardFn``: the chosen components and their weighted sum.

    Upstream sums the four rewards unweighted (range -1..4); the paper gives no weights, so the
    default weights are 1. R_step needs a ``Similarity`` service; without one a result that
    includes "step" is returned unscored (never silently 0).
    """

    components: tuple[str, ...] = _COMPONENTS
    weights: tuple[float, ...] = (1.0, 1.0, 1.0, 1.0)
    mode: Mode = "paper"
    similarity: Similarity | None = None
    config: LatConfig = LatConfig()

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_group([parsed], sample)[0]

    def score_group(self, group: Sequence[Parsed], sample: Sample) -> list[RewardResult]:
        """Score a group of responses to one sample, with one similarity call for all steps."""
        if "step" in self.components and self.similarity is None:
            return [RewardResult.unscored("lat.step needs a Similarity service") for _ in group]
        gold = sample.answers[0] if sample.answers else ""
        gold_box, gold_page = _gold_of(sample)
        step_scores: list[float] = []
        if "step" in self.components and self.similarity is not None:
            pages = [_open(p) for p in sample.pages]
            single = len(pages) == 1
            planner = plan_steps_upstream if self.mode == "upstream" else plan_steps_paper
            plans = [planner(p.text, pages, single_image=single) for p in group]
            all_scores = score_plans(plans, self.similarity)
            step_scores = [
                finish_step_reward(
                    plan, s, p.text, gold, answerable=sample.answerable, mode=self.mode, config=self.config
                )
                for plan, s, p in zip(plans, all_scores, group, strict=True)
            ]
        results = []
        for i, p in enumerate(group):
            values: dict[str, float] = {}
            for name in self.components:
                if name == "accuracy":
                    values[name] = accuracy_reward(p.text, gold, answerable=sample.answerable, mode=self.mode)
                elif name == "ground":
                    values[name] = ground_reward(
                        p.text, gold_box, gold_page, mode=self.mode, config=self.config
                    )
                elif name == "format":
                    values[name] = format_reward(p.text)
                elif name == "step":
                    values[name] = step_scores[i]
            weight = dict(zip(_COMPONENTS, self.weights, strict=True))
            total = sum(weight[k] * v for k, v in values.items())
            results.append(RewardResult(total=total, components=values))
        return results


def _gold_of(sample: Sample) -> tuple[tuple[float, float, float, float] | None, int | None]:
    if not sample.answerable or not sample.gold_boxes:
        return None, None
    gold = sample.gold_boxes[0]
    index = sample.page_index(gold.page_id) if sample.pages else 0
    return gold.box.as_tuple(), index


def _open(page: Page) -> PILImage | None:
    try:
        return page.open_image()
    except OSError:
        logger.warning("page image %s could not be opened; its steps score 0", page.image_path)
        return None


for _name in _COMPONENTS:
    REWARDS.add(f"lat.{_name}", LatReward(components=(_name,)))
REWARDS.add("lat", LatReward())
REWARDS.add("lat.upstream", LatReward(mode="upstream"))
