"""EVisRAG rewards (RS-GRPO): perception/evidence, derivation/answer, format, the isObserve /
isThink punishments, the soft overlong punishment and their compositions (EVisRAG App. A.3,
Eqs. 7-8 and 11-13), in ``paper`` and ``upstream`` modes.

Output format: ``<observe>..</observe><evidence>[1]: ..\\n[2]: no relevant information
</evidence><think>..</think><answer>..|insufficient to answer</answer>``.

``upstream`` reproduces ``evidencecot.py`` of OpenBMB/VisRAG (the conformance contract): blocks
are cut with ``str.split`` on the first open tag, evidence entries are cut at ``[i+1]`` even
inside text, and with six gold entries the evidence score is left unnormalised (up to 18).
``paper`` follows Eq. 11-13. Token scopes live in ``evidra.rewards.scopes``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from evidra.errors import InvalidInputError
from evidra.rewards.base import REWARDS, RewardResult
from evidra.rewards.text import (
    INSUFFICIENT_ANSWER,
    NO_RELEVANT_INFORMATION,
    bow_f1,
    normalize_squad,
    set_f1,
    substring_em,
)
from evidra.tagscan import first_block, parse_digits
from evidra.types import Parsed, Sample, Trajectory

Mode = Literal["paper", "upstream"]

K_POS = 3.0  # weight of a relevant image in the perception reward (Eq. 11; upstream 3.0)
MAX_IMAGES_UPSTREAM = 6
_FORMAT = re.compile(
    r"<observe>.*?</observe>\s*<evidence>.*?</evidence>\s*<think>.*?</think>\s*<answer>.*?</answer>",
    re.DOTALL,
)
_TAGS = ("observe", "evidence", "think", "answer")
_ENTRY = re.compile(r"\[(\d+)\]\s*:")


class GoldFormatError(InvalidInputError, IndexError):
    """The gold string lacks the block upstream reads from it (upstream raised IndexError)."""


def split_block(text: str, tag: str) -> str | None:
    """Upstream block cut: ``text.split('<tag>')[1].split('</tag>')[0]`` if both tags occur
    anywhere (order unchecked), else None.

    >>> split_block("<a>x</a><a>y</a>", "a"), split_block("<a>x", "a")
    ('x', None)
    """
    open_, close = f"<{tag}>", f"</{tag}>"
    if open_ not in text or close not in text:
        return None
    return text.split(open_)[1].split(close)[0]


def _gold_block(gold: str, tag: str, mode: Mode) -> str:
    """The gold's ``<tag>`` block. Upstream indexes ``split('<tag>')[1]`` and raises IndexError
    without the open tag; we raise GoldFormatError (an IndexError) deliberately, naming the fix.
    Paper mode accepts an untagged gold as the block itself."""
    open_ = f"<{tag}>"
    if open_ in gold:
        return gold.split(open_)[1].split(f"</{tag}>")[0]
    if mode == "paper":
        return gold
    raise GoldFormatError(
        f"ground truth {gold[:80]!r} has no {open_} block; EVisRAG gold strings are "
        f"'<evidence>[1]: ..</evidence><answer>..</answer>' (or use mode='paper' with a plain answer)"
    )


# ---- derivation / answer (Eq. 12) ------------------------------------------------------------


def derivation_reward(response: str, gold: str, *, sufficient: bool = True, mode: Mode = "paper") -> float:
    """R_derivation = F1(a_pred, a_gold) on SQuAD-normalised token sets (EVisRAG Eq. 12).

    ``gold`` is the answer or a gold string with an ``<answer>`` block; with ``sufficient=False``
    the gold becomes "insufficient to answer" (paper mode). No closed answer block -> 0.

    >>> derivation_reward("<answer>The Eiffel Tower, Paris</answer>", "<answer>Eiffel Tower</answer>")
    0.8
    """
    if mode == "upstream":
        pred = split_block(response, "answer")
        if pred is None:
            return 0.0
        return set_f1(normalize_squad(pred), normalize_squad(_gold_block(gold, "answer", mode)))
    pred = first_block(response, "<answer>", "</answer>")  # <answer>(.*?)</answer>, DOTALL
    if pred is None:
        return 0.0
    target = _gold_block(gold, "answer", mode) if sufficient else INSUFFICIENT_ANSWER
    return set_f1(pred, target)


# ---- perception / evidence (Eq. 11) ----------------------------------------------------------


def evidence_entries(block: str) -> dict[int, str]:
    """``[k]: text`` entries of an evidence block (k 1-based); an entry runs to the next
    ``[j]:`` marker, so "see [2] below" inside text does not cut it. First occurrence wins; an
    index too long to be an image number (``parse_digits``) gives no entry.

    >>> evidence_entries("[1]: a [2] b\\n[2]: no relevant information")
    {1: 'a [2] b', 2: 'no relevant information'}
    """
    marks = list(_ENTRY.finditer(block))
    out: dict[int, str] = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(block)
        k = parse_digits(m.group(1))
        if k is not None:
            out.setdefault(k, block[m.end() : end].strip())
    return out


def _is_negative(text: str) -> bool:
    return normalize_squad(text) == NO_RELEVANT_INFORMATION


def _perception_upstream(response: str, gold: str) -> float:
    obs = split_block(response, "evidence")
    if obs is None:
        return 0.0
    gt = _gold_block(gold, "evidence", "upstream")
    score, full = 0.0, 0.0
    for i in range(1, MAX_IMAGES_UPSTREAM + 1):
        if f"[{i}]:" not in gt:
            if full > 0.0:
                score /= full
            break
        gold_i = gt.split(f"[{i}]:")[1].split(f"[{i + 1}]")[0].strip()
        weight = K_POS if gold_i != NO_RELEVANT_INFORMATION else 1.0
        full += weight
        if f"[{i}]:" not in obs:
            continue
        gen_i = obs.split(f"[{i}]:")[1].split(f"[{i + 1}]")[0].strip()
        match = set_f1(gen_i, gold_i) if len(gold_i.split()) >= 5 else substring_em(gen_i, gold_i)
        score += match * weight
    return score  # six gold entries: the loop never breaks and the score stays unnormalised


def perception_reward(response: str, gold: str, *, mode: Mode = "paper", k_pos: float = K_POS) -> float:
    """R_perception (EVisRAG Eq. 11): per image, k_pos * F1 for a relevant image, 1[pred says
    "no relevant information"] for an irrelevant one, normalised by sum(y_i k_pos + (1 - y_i)).

    paper: any number of images, always normalised, in [0, 1]. upstream: F1 only for gold
    entries of >= 5 words (substring EM otherwise), at most 6 images, unnormalised when all six
    are present (range up to 18), entries cut at '[i+1]' even inside text.

    >>> fact = "[1]: revenue was 5 million dollars in 2020"
    >>> gold = f"<evidence>{fact}\\n[2]: no relevant information</evidence>"
    >>> perception_reward(f"<evidence>{fact}\\n[2]: a cat</evidence>", gold)  # (3 * 1 + 0) / (3 + 1)
    0.75
    """
    if mode == "upstream":
        return _perception_upstream(response, gold)
    pred_block = first_block(response, "<evidence>", "</evidence>")
    if pred_block is None:
        return 0.0
    gold_entries = evidence_entries(_gold_block(gold, "evidence", mode))
    pred_entries = evidence_entries(pred_block)
    score, full = 0.0, 0.0
    for k, gold_k in sorted(gold_entries.items()):
        pred_k = pred_entries.get(k)
        if _is_negative(gold_k):
            full += 1.0
            score += 1.0 if pred_k is not None and _is_negative(pred_k) else 0.0
        else:
            full += k_pos
            score += k_pos * set_f1(pred_k, gold_k) if pred_k is not None else 0.0
    return score / full if full > 0 else 0.0


# ---- format, punishments, overlong -----------------------------------------------------------


def format_reward(response: str) -> float:
    """R_format (Eq. 13): 1 iff the whole response is observe, evidence, think, answer blocks in
    order (whitespace only between them, none outside) and each tag occurs exactly once."""
    once = all(response.count(f"<{t}>") == 1 and response.count(f"</{t}>") == 1 for t in _TAGS)
    # counted first: with each tag once, the lazy groups of _FORMAT cannot backtrack (linear)
    return 1.0 if once and _FORMAT.fullmatch(response) else 0.0


def observe_punishment(response: str) -> float:
    """isObserve: -1 if the observe block already cites an image as '[1]'..'[5]' (evidence
    belongs in <evidence>), else 0. Same in both modes (not described in the paper)."""
    observe = split_block(response, "observe")
    if observe is None:
        return 0.0
    return -1.0 if any(f"[{i}]" in observe for i in range(1, 6)) else 0.0


def think_punishment(response: str) -> float:
    """isThink: -1 if the think block is exactly the answer block (no reasoning), else 0."""
    think, answer = split_block(response, "think"), split_block(response, "answer")
    if think is None or answer is None:
        return 0.0
    return -1.0 if think == answer else 0.0


def soft_overlong_punishment(
    response_length: int, max_length: int = 1536, buffer: int = 512, min_length: int = 200
) -> float:
    """DAPO-style soft length penalty with a floor: -1 below ``min_length``, 0 up to
    ``max_length - buffer``, then linear down to -1 at ``max_length``, -1 beyond.

    >>> soft_overlong_punishment(1100)
    -0.1484375
    """
    if response_length < min_length:
        return -1.0
    expected = max_length - buffer
    if response_length <= expected:
        return 0.0
    if response_length <= max_length:
        return (expected - response_length) / buffer
    return -1.0


# ---- compositions ----------------------------------------------------------------------------

UPSTREAM_COMPONENTS = ("accuracy", "evidence", "format", "overlong", "isObserve", "isThink")


def sum_all(response: str, response_length: int, ground_truth: str) -> dict[str, float]:
    """Upstream ``sum_all`` for one item: the six RS-GRPO components (accuracy and evidence x3)
    and ``overall`` (used only for DAPO-style group filtering 0.01 < mean < 6.9).

    The addition order of ``overall`` is upstream's, so floats match bit for bit.
    """
    acc = 3 * derivation_reward(response, ground_truth, mode="upstream")
    evi = 3 * perception_reward(response, ground_truth, mode="upstream")
    overlong = soft_overlong_punishment(response_length, 1536, 512, 200)
    fmt = format_reward(response)
    obs, think = observe_punishment(response), think_punishment(response)
    return {
        "overall": acc + evi + overlong + fmt + obs + think,
        "accuracy": acc,
        "evidence": evi,
        "format": fmt,
        "overlong": overlong,
        "isObserve": obs,
        "isThink": think,
    }


def paper_rewards(response: str, gold: str, *, sufficient: bool = True) -> RewardResult:
    """The paper's three rewards and their scope values (EVisRAG Eqs. 7-8, 11-13).

    Tokens of the observe and evidence scopes get mean(R_perception, R_format); think and answer
    tokens get mean(R_derivation, R_format). ``total`` is the plain sum (the "w/o RS-GRPO" GRPO
    variant applies it to every token).
    """
    perception = perception_reward(response, gold)
    derivation = derivation_reward(response, gold, sufficient=sufficient)
    fmt = format_reward(response)
    early, late = (perception + fmt) / 2, (derivation + fmt) / 2
    return RewardResult(
        total=perception + derivation + fmt,
        components={"perception": perception, "derivation": derivation, "format": fmt},
        scopes={"observe": early, "evidence": early, "think": late, "answer": late},
    )


EVAL_REFUSALS = (NO_RELEVANT_INFORMATION, INSUFFICIENT_ANSWER, "insufficient to answer the question")


def evaluate_predictions(pred: str, golds: Sequence[str]) -> dict[str, float | bool]:
    """EVisRAG evaluation metrics of one prediction (``src/evisrag/eval.py``), max over golds.

    em: normalised equality; acc: gold token set a subset of the predicted set; f1: bag-of-words
    with +1e-7; hallucination: 0 iff exactly one side is "no relevant information". A gold with
    no token overlap is skipped entirely (so em stays 0 even for two empty strings). Unanswerable
    items are scored against ``EVAL_REFUSALS``.
    """
    metric: dict[str, float | bool] = {"is_valid_answer": False, "acc": 0, "em": 0, "f1": 0}
    metric.update({"math_equal": 0, "bertsc": 0, "hallucination": 0})
    p = normalize_squad(pred)
    for gold in golds:
        g = normalize_squad(gold)
        f1 = bow_f1(p, g, eps=1e-7)
        if f1 == 0.0:
            continue
        values = {
            "em": int(p == g),
            "acc": int(set(g.split()) <= set(p.split())),
            "f1": f1,
            "bertsc": 0,
            "hallucination": 0 if NO_RELEVANT_INFORMATION in (g, p) and g != p else 1,
        }
        for key, value in values.items():
            metric[key] = max(value, metric[key])
    return metric


# ---- RewardFn wrappers -------------------------------------------------------------------------


def gold_string(sample: Sample) -> str:
    """The EVisRAG gold ``<evidence>[i]: ..</evidence><answer>..</answer>`` of a sample:
    ``extras['ground_truth']`` if given, else built from ``gold_evidence`` per page (missing ->
    "no relevant information") and the first answer ("insufficient to answer" when insufficient)."""
    given = sample.extras.get("ground_truth")
    if isinstance(given, str):
        return given
    lines = [
        f"[{i}]: {sample.gold_evidence.get(p.id, NO_RELEVANT_INFORMATION)}"
        for i, p in enumerate(sample.pages, 1)
    ]
    insufficient = sample.sufficient is False or not sample.answerable or not sample.answers
    answer = INSUFFICIENT_ANSWER if insufficient else sample.answers[0]
    return "<evidence>" + "\n".join(lines) + f"</evidence><answer>{answer}</answer>"


@dataclass(frozen=True)
class EvisragReward:
    """EVisRAG reward as a ``RewardFn``. paper: Eqs. 11-13 with Eq. 7-8 scope values. upstream:
    ``sum_all``'s six components, each also a scope value keyed by its reward name (the token
    span of each is given by ``evidra.rewards.scopes.UPSTREAM_SCOPE_RULES``); needs the
    trajectory for the response length of the overlong punishment."""

    mode: Mode = "paper"
    weights: Mapping[str, float] | None = None  # None: paper sum / upstream 'overall'

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        gold = gold_string(sample)
        if self.mode == "paper":
            result = paper_rewards(parsed.text, gold)
        else:
            if trajectory is None:
                return RewardResult.unscored("evisrag upstream needs the trajectory (response length)")
            scores = sum_all(parsed.text, trajectory.num_policy_tokens, gold)
            parts = {k: scores[k] for k in UPSTREAM_COMPONENTS}
            result = RewardResult(total=scores["overall"], components=parts, scopes=parts)
        if self.weights is None:
            return result
        total = sum(self.weights.get(k, 0.0) * v for k, v in result.components.items())
        return RewardResult(total=total, components=result.components, scopes=result.scopes)


REWARDS.add("evisrag", EvisragReward())
REWARDS.add("evisrag.upstream", EvisragReward(mode="upstream"))
for _name in ("perception", "derivation", "format"):
    REWARDS.add(f"evisrag.{_name}", EvisragReward(weights={_name: 1.0}))
