"""VRAG-RL rewards: retrieval NDCG, model-based answer reward, pattern reward (VRAG-RL §2.3).

``r = alpha * r_Ret + beta * r_Ans + gamma * r_Pat`` (VRAG-RL Eq. 12), with r_Ret the
modified NDCG of the pages the trajectory inserted (Eq. 7-9), r_Ans the judge's 0/1 verdict
(Eq. 11) and r_Pat the pattern reward (Eq. 10). The paper fixes only alpha + beta + gamma = 1,
gamma = 0 after SFT and gamma = 0.1 for RL "with cold start" (§2.3); the default weights
(0.2, 0.7, 0.1) come from the released code, not the paper. The paper's judge (r_Ans) is
Qwen2.5-7B-Instruct (App. A); the released code asks qwen-max.

Two registered variants (``VRAGRL_RULES``; the rewards ``vragrl.total`` and ``vragrl.upstream``):

* ``paper`` (default): the pattern reward and the extracted answer read the *policy* turns
  only (``Trajectory.texts``), so text injected by the environment (the invalid-action
  message, which itself contains ``<search>`` and ``<answer> Beijing </answer>``) can neither
  pass the pattern check nor become the answer; NDCG counts distinct pages; plain weighted sum.
* ``upstream``: ``train_reward_upstream`` reproduces ``RMManager.__call__`` of the released
  ``rm.py``: the whole decoded response (observations included) is checked, the reward is 0
  without both an ``<answer>`` and a ``<search>``, NDCG counts duplicates.

Inputs of the ``RewardFn`` wrapper: the question and ``answers[0]`` of the ``Sample``, its
``gold_pages``, and the retrieved page ids in insertion order, ``parsed.retrieved`` (set from the
search environment's steps).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry
from evidra.core.tagscan import find_blocks, find_named_blocks, first_block
from evidra.core.types import Parsed, Sample, Trajectory
from evidra.metrics.anls import anls_vrag_upstream
from evidra.metrics.ranking import vragrl_ndcg, vragrl_ndcg_upstream
from evidra.rewards.judge import RuleJudge
from evidra.rewards.judge_protocol import Judge, JudgeItem, Verdict, judge_present
from evidra.rewards.reward import REWARDS, RewardResult, check_weights, weighted_sum

logger = logging.getLogger(__name__)

UPSTREAM_DATA_SOURCES = ("rag", "slidevqa_test", "mmlongdoc", "vidoseek")
NO_ANSWER_PLACEHOLDER = "Please Judge False"  # what rm.py sends the judge when no answer exists


class UnknownDataSourceError(InvalidInputError, NotImplementedError):
    """rm.py's ``_default_compute_score`` raises NotImplementedError for other data sources."""


# --- upstream text helpers (VRAG-RL verl/utils/reward_score/vrag.py) -------------------------

# The released patterns are found with evidra.core.tagscan (linear; lazy groups rescan unclosed tags):
# <\|im_start\|>user.*?<\|im_end\|> without DOTALL, <(answer|search|think|bbox)>(.*?)</\1>,
# <(search|answer|bbox)>(.*?)</\1> and <judge>(.*?)</judge>; <answer>.*</answer> is a find.
_ALL_TAGS = ("answer", "search", "think", "bbox")
_ACTION_TAGS = ("search", "answer", "bbox")


def _has_block(text: str, tag: str) -> bool:
    """Whether ``<tag>.*</tag>`` (DOTALL) matches: an opening with a closing after it."""
    start = text.find(f"<{tag}>")
    return start >= 0 and text.find(f"</{tag}>", start + len(tag) + 2) >= 0


def remove_text_between_tags(text: str) -> str:
    """Delete ``<|im_start|>user ... <|im_end|>`` spans on ONE line (released: no DOTALL).

    Real observation turns start ``<|im_start|>user\\n``, so they are never removed: this is
    the upstream bug that lets injected instructions reach the format check.
    """
    kept, pos = [], 0
    for block in find_blocks(text, "<|im_start|>user", "<|im_end|>", dotall=False):
        kept.append(text[pos : block.start])
        pos = block.end
    kept.append(text[pos:])
    return "".join(kept)


def compute_format_reward_only(
    predict_str: str, ground_truth: object = None, extra_info: object = None
) -> float:
    """1.0 iff ``<answer>.*</answer>`` and ``<search>.*</search>`` both occur (released rule).

    >>> compute_format_reward_only("<search>q</search><answer>x</answer>")
    1.0
    >>> compute_format_reward_only("<answer>x</answer>")  # answering without a search scores 0
    0.0
    """
    text = remove_text_between_tags(predict_str)
    return 1.0 if _has_block(text, "answer") and _has_block(text, "search") else 0.0


def get_answer_from_predict_str(text: str) -> str | None:
    """Raw text of the LAST ``<answer>..</answer>`` (rfind rule, not stripped), None if absent.

    >>> get_answer_from_predict_str("<answer>a</answer> <answer> b </answer>")
    ' b '
    """
    end = text.rfind("</answer>")
    if end == -1:
        return None
    start = text.rfind("<answer>", 0, end)
    if start == -1:
        return None
    return text[start + len("<answer>") : end]


def extract_tags(text: str) -> str:
    """The rollout's cleaning step: keep only ``<answer|search|think|bbox>`` blocks, one per line."""
    return "\n".join(b.group() for b in find_named_blocks(text, _ALL_TAGS))


def postprocess_predictions(predictions: Sequence[str]) -> tuple[list[str | None], list[str]]:
    """First ``<search|answer|bbox>`` block of each prediction as ``(action, stripped content)``."""
    actions: list[str | None] = []
    contents: list[str] = []
    for prediction in predictions:
        if not isinstance(prediction, str):  # released: ValueError for a non-string prediction
            raise InvalidInputError(f"prediction must be a str, got {type(prediction).__name__}")
        match = next(find_named_blocks(prediction, _ACTION_TAGS), None)
        actions.append(match.head.group(1) if match else None)
        contents.append(match.body().strip() if match else "")
    return actions, contents


def parse_judge_response_upstream(response: str) -> bool | None:
    """rm.py ``parse_judge_response``, for replay only (``judge.parse_verdicts`` is strict).

    On the FIRST case-sensitive ``<judge>..</judge>`` match including its tags: True if
    'true'/'True' occurs, elif 'false'/'False' -> False, else None; so
    ``<judge>False. It is not true</judge>`` reads as True.
    """
    match = next(find_blocks(response if isinstance(response, str) else "", "<judge>", "</judge>"), None)
    if match is None:
        return None
    full = match.group()
    if "true" in full or "True" in full:
        return True
    if "false" in full or "False" in full:
        return False
    return None


def compute_score_intended(
    predict_str: str, ground_truth: str | Sequence[str], extra_info: object = None
) -> float:
    """What vrag.py ``compute_score`` was written to do: format gate, then ANLS(0.5) of the answer.

    The released function always raises TypeError (it calls ``compute_format_reward_only``
    with one argument); this deliberate deviation returns the intended value instead.
    """
    if compute_format_reward_only(predict_str) == 0.0:
        return 0.0
    answer = get_answer_from_predict_str(predict_str)
    if answer is None:
        return 0.0
    golds = [ground_truth] if isinstance(ground_truth, str) else list(ground_truth)
    return anls_vrag_upstream(golds, answer, threshold=0.5) if golds else 0.0


def page_names_upstream(
    retrieved_image_paths: Sequence[str], file_name: str, pages: Sequence[int]
) -> tuple[list[str], list[str]]:
    """rm.py naming: retrieved basenames without ``.jpg``; gold ``{file_name minus .pdf}_{page}``."""
    retrieved = [os.path.basename(p).replace(".jpg", "") for p in retrieved_image_paths]
    stem = file_name.replace(".pdf", "")
    return retrieved, [f"{stem}_{page}" for page in pages]


def train_reward_upstream(
    response_str: str,
    data_source: str,
    retrieved_image_paths: Sequence[str],
    file_name: str,
    reference_pages: Sequence[int],
    judge_score: float,
    eval_mode: bool = False,
) -> float:
    """``RMManager.__call__`` per item: 0 unless the pattern passes; else
    ``0.7 * judge + 0.1 * pattern + 0.2 * ndcg`` (train) or the judge score (eval)."""
    if data_source not in UPSTREAM_DATA_SOURCES:
        raise UnknownDataSourceError(
            f"data_source {data_source!r} is not scored by the released reward manager; "
            f"use one of {UPSTREAM_DATA_SOURCES}"
        )
    score = compute_format_reward_only(response_str, None, None)
    if score <= 0:
        return 0.0
    if eval_mode:
        return judge_score
    retrieved, gold = page_names_upstream(retrieved_image_paths, file_name, reference_pages)
    values = {"answer": judge_score, "pattern": score, "retrieval": vragrl_ndcg_upstream(retrieved, gold)}
    return weighted_sum(values, WEIGHTS)


# --- paper-mode components -------------------------------------------------------------------


def pattern_reward(policy_turns: Sequence[str]) -> float:
    """VRAG-RL Eq. 10 on the policy's own turns: 1.0 iff some turn holds a non-empty
    ``<search>`` action and the final turn holds an ``<answer>``."""
    if not policy_turns:
        return 0.0
    searches = (b.body() for turn in policy_turns for b in find_blocks(turn, "<search>", "</search>"))
    searched = any(query.strip() for query in searches)
    answered = first_block(policy_turns[-1], "<answer>", "</answer>") is not None
    return 1.0 if searched and answered else 0.0


def final_answer(policy_turns: Sequence[str]) -> str | None:
    """Stripped content of the last ``<answer>`` block written by the policy."""
    for turn in reversed(policy_turns):
        answer = get_answer_from_predict_str(turn)
        if answer is not None:
            return answer.strip()
    return None


COMPONENTS = ("retrieval", "answer", "pattern")
WEIGHTS: Mapping[str, float] = {
    "retrieval": 0.2,
    "answer": 0.7,
    "pattern": 0.1,
}  # alpha, beta, gamma (released)


def check_eq12(weights: Mapping[str, float]) -> dict[str, float]:
    """VRAG-RL weights: components of ``COMPONENTS``, >= 0, summing to 1 (Eq. 12)."""
    checked = check_weights(weights, COMPONENTS, "vragrl")
    total = sum(checked.values())
    if abs(total - 1.0) > 1e-9:
        raise InvalidInputError(f"VRAG-RL weights must sum to 1 (Eq. 12), got {checked} (sum {total})")
    return checked


# --- the reward and its variants ---------------------------------------------------------------


def _policy_turns(parsed: Parsed, trajectory: Trajectory | None) -> list[str]:
    return list(trajectory.texts) if trajectory is not None and trajectory.texts else [parsed.text]


@dataclass(frozen=True)
class _Prepared:
    values: dict[str, float]  # retrieval and pattern, in the variant's order of addition
    item: JudgeItem | None  # None: no judge call (no answer, or gated by the pattern)


def _prepare_paper(parsed: Parsed, sample: Sample, trajectory: Trajectory | None) -> _Prepared:
    """Pattern and answer read the policy's own turns; NDCG counts distinct pages."""
    reference = sample.answers[0] if sample.answers else None
    turns = _policy_turns(parsed, trajectory)
    answer = final_answer(turns)
    item = JudgeItem(sample.question, reference, answer) if answer else None
    values = {
        "retrieval": vragrl_ndcg(list(parsed.retrieved), sample.gold_pages),
        "pattern": pattern_reward(turns),
    }
    return _Prepared(values, item)


def _prepare_upstream(parsed: Parsed, sample: Sample, trajectory: Trajectory | None) -> _Prepared:
    """rm.py: the whole decoded response (``parsed.text``) is checked; NDCG counts duplicates."""
    reference = sample.answers[0] if sample.answers else None
    r_pat = compute_format_reward_only(parsed.text)
    answer = get_answer_from_predict_str(parsed.text)
    generated = answer if answer is not None else NO_ANSWER_PLACEHOLDER
    item = JudgeItem(sample.question, reference, generated) if r_pat > 0 else None
    values = {
        "pattern": r_pat,
        "retrieval": vragrl_ndcg_upstream(list(parsed.retrieved), list(sample.gold_pages)),
    }
    return _Prepared(values, item)


@dataclass(frozen=True)
class VragRLRules:
    """One variant of VRAG-RL's reward: how a response is read, the order in which the weighted
    components are added, and whether a failed pattern check zeroes the total (rm.py)."""

    name: str
    prepare: Callable[[Parsed, Sample, Trajectory | None], _Prepared]
    order: tuple[str, ...]
    gated: bool
    whole_response: bool = False  # reads the whole decoded response, observations included (rm.py)


VRAGRL_RULES: Registry[VragRLRules] = Registry("VRAG-RL reward rules")
VRAGRL_RULES.add("paper", VragRLRules("paper", _prepare_paper, COMPONENTS, gated=False))
# rm.py's order of terms (0.7 judge + 0.1 pattern + 0.2 ndcg), so the float sum matches bit for bit
VRAGRL_RULES.add(
    "upstream",
    VragRLRules("upstream", _prepare_upstream, ("answer", "pattern", "retrieval"), True, whole_response=True),
)


class VragRLReward:
    """VRAG-RL's integrated reward (Eq. 12) as a ``RewardFn``; the judge is an injected service.

    ``score_batch`` judges a whole group in one call. An item whose verdict stays None is
    returned as ``RewardResult.unscored("judge")`` and counted in ``unscored_count``. The
    ``upstream`` rules apply the released gate (0 without both answer and search, over
    ``parsed.text`` as the full decoded response) and duplicate-counting NDCG. Weights
    ``{"answer": 1}`` give the judge's verdict alone (the released evaluation score).
    """

    components = COMPONENTS

    def __init__(
        self,
        judge: Judge | None = None,
        weights: Mapping[str, float] | None = None,
        rules: VragRLRules | None = None,
    ) -> None:
        self.judge = judge if judge is not None else RuleJudge()
        self.weights = check_eq12(WEIGHTS if weights is None else weights)
        self.rules = rules if rules is not None else VRAGRL_RULES.get("paper")
        self.unscored_count = 0

    @property
    def component_names(self) -> tuple[str, ...]:
        return self.rules.order

    def reweighted(self, weights: Mapping[str, float]) -> VragRLReward:
        merged = {**self.weights, **check_weights(weights, COMPONENTS, "vragrl")}
        return VragRLReward(self.judge, merged, self.rules)

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        return self.score_batch([(parsed, sample, trajectory)])[0]

    def score_batch(self, batch: Sequence[tuple[Parsed, Sample, Trajectory | None]]) -> list[RewardResult]:
        prepared = [self.rules.prepare(*entry) for entry in batch]
        verdicts = judge_present(self.judge, [p.item for p in prepared])
        return [self._result(p, v) for p, v in zip(prepared, verdicts, strict=True)]

    def _result(self, p: _Prepared, verdict: Verdict) -> RewardResult:
        if verdict.value is None:
            self.unscored_count += 1
            logger.debug("VRAG-RL item unscored: %s", verdict.error)
            return RewardResult.unscored("judge")
        every = {**p.values, "answer": float(verdict.value)}
        values = {name: every[name] for name in self.rules.order}
        if self.rules.gated and values["pattern"] <= 0:
            return RewardResult(total=0.0, components=values)
        return RewardResult.weighted(values, self.weights)


def vragrl_reward(
    variant: str = "paper", *, judge: Judge | None = None, weights: Mapping[str, float] | None = None
) -> VragRLReward:
    """The VRAG-RL reward of a registered variant (``VRAGRL_RULES``: paper | upstream); the options
    are ``VragRLReward``'s."""
    return VragRLReward(judge, weights, rules=VRAGRL_RULES.get(variant))


def retrieval_reward(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """VRAG-RL Eq. 9 alone (distinct pages)."""
    value = vragrl_ndcg(list(parsed.retrieved), sample.gold_pages)
    return RewardResult(total=value, components={"retrieval": value})


def pattern_reward_fn(parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
    """VRAG-RL Eq. 10 alone, on the policy turns."""
    value = pattern_reward(_policy_turns(parsed, trajectory))
    return RewardResult(total=value, components={"pattern": value})


REWARDS.add("vragrl.retrieval", retrieval_reward)
REWARDS.add("vragrl.pattern", pattern_reward_fn)
REWARDS.add("vragrl.answer", VragRLReward(weights={"answer": 1.0}))
REWARDS.add("vragrl.total", VragRLReward())
REWARDS.add("vragrl.upstream", vragrl_reward("upstream"))
