"""EVisRAG rewards (RS-GRPO): perception/evidence, derivation/answer, format, the isObserve /
isThink punishments, the soft overlong punishment and their compositions (EVisRAG App. A.3,
Eqs. 7-8 and 11-13), as the paper writes them (``evisrag``) and as the released code computes them
(``evisrag.upstream``).

Output format: ``<observe>..</observe><evidence>[1]: ..\\n[2]: no relevant information
</evidence><think>..</think><answer>..|insufficient to answer</answer>``.

The released rules reproduce ``evidencecot.py`` of OpenBMB/VisRAG (the conformance contract): blocks
are cut with ``str.split`` on the first open tag, evidence entries are cut at ``[i+1]`` even
inside text, and with six gold entries the evidence score is left unnormalised (up to 18).
The paper rules follow Eq. 11-13. Token scopes live in ``evidra.rewards.scopes``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from evidra.core.errors import InvalidInputError
from evidra.core.registry import Registry
from evidra.core.tagscan import first_block, parse_digits
from evidra.core.types import Parsed, Sample, Trajectory
from evidra.metrics.text import (
    INSUFFICIENT_ANSWER,
    NO_RELEVANT_INFORMATION,
    normalize_squad,
    set_f1,
    substring_em,
)
from evidra.rewards.reward import REWARDS, RewardResult, check_weights, weighted_sum

# k_pos of Eq. 11, the weight of a relevant image: the paper names no value; 3.0 is the released code's
K_POS = 3.0
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


def _gold_block(gold: str, tag: str) -> str:
    """The gold's ``<tag>`` block. Upstream indexes ``split('<tag>')[1]`` and raises IndexError
    without the open tag; we raise GoldFormatError (an IndexError) deliberately, naming the fix."""
    open_ = f"<{tag}>"
    if open_ in gold:
        return gold.split(open_)[1].split(f"</{tag}>")[0]
    raise GoldFormatError(
        f"ground truth {gold[:80]!r} has no {open_} block; EVisRAG gold strings are "
        f"'<evidence>[1]: ..</evidence><answer>..</answer>' (or use the paper rules with a plain answer)"
    )


def _gold_block_or_all(gold: str, tag: str) -> str:
    """Paper rules: the gold's ``<tag>`` block, or an untagged gold as the block itself."""
    return _gold_block(gold, tag) if f"<{tag}>" in gold else gold


# ---- derivation / answer (Eq. 12) ------------------------------------------------------------


def derivation_paper(response: str, gold: str, *, sufficient: bool = True) -> float:
    """R_derivation = F1(a_pred, a_gold) on SQuAD-normalised token sets (EVisRAG Eq. 12).

    ``gold`` is the answer or a gold string with an ``<answer>`` block; with ``sufficient=False``
    the gold becomes "insufficient to answer". No closed answer block -> 0.

    >>> derivation_paper("<answer>The Eiffel Tower, Paris</answer>", "<answer>Eiffel Tower</answer>")
    0.8
    """
    pred = first_block(response, "<answer>", "</answer>")  # <answer>(.*?)</answer>, DOTALL
    if pred is None:
        return 0.0
    target = _gold_block_or_all(gold, "answer") if sufficient else INSUFFICIENT_ANSWER
    return set_f1(pred, target)


def derivation_upstream(response: str, gold: str) -> float:
    """The released answer reward: F1 of ``split_block`` cuts of response and gold."""
    pred = split_block(response, "answer")
    if pred is None:
        return 0.0
    return set_f1(normalize_squad(pred), normalize_squad(_gold_block(gold, "answer")))


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


def perception_upstream(response: str, gold: str) -> float:
    """The released evidence reward: F1 only for gold entries of >= 5 words (substring EM
    otherwise), at most 6 images, unnormalised when all six are present (range up to 18),
    entries cut at '[i+1]' even inside text."""
    obs = split_block(response, "evidence")
    if obs is None:
        return 0.0
    gt = _gold_block(gold, "evidence")
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


def perception_paper(response: str, gold: str, *, k_pos: float = K_POS) -> float:
    """R_perception (EVisRAG Eq. 11): per image, k_pos * F1 for a relevant image, 1[pred says
    "no relevant information"] for an irrelevant one, normalised by sum(y_i k_pos + (1 - y_i)):
    any number of images, always normalised, in [0, 1].

    >>> fact = "[1]: revenue was 5 million dollars in 2020"
    >>> gold = f"<evidence>{fact}\\n[2]: no relevant information</evidence>"
    >>> perception_paper(f"<evidence>{fact}\\n[2]: a cat</evidence>", gold)  # (3 * 1 + 0) / (3 + 1)
    0.75
    """
    pred_block = first_block(response, "<evidence>", "</evidence>")
    if pred_block is None:
        return 0.0
    gold_entries = evidence_entries(_gold_block_or_all(gold, "evidence"))
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

PAPER_COMPONENTS = ("perception", "derivation", "format")  # Eqs. 11-13
UPSTREAM_COMPONENTS = ("accuracy", "evidence", "format", "overlong", "isObserve", "isThink")
_OVERALL_ORDER = ("accuracy", "evidence", "overlong", "format", "isObserve", "isThink")  # the released sum's
ONES = dict.fromkeys(UPSTREAM_COMPONENTS, 1.0)


def sum_all(response: str, response_length: int, ground_truth: str) -> dict[str, float]:
    """Upstream ``sum_all`` for one item: the six RS-GRPO components (accuracy and evidence x3)
    and ``overall`` (used only for DAPO-style group filtering 0.01 < mean < 6.9).

    The addition order of ``overall`` is upstream's, so floats match bit for bit.
    """
    acc = 3 * derivation_upstream(response, ground_truth)
    evi = 3 * perception_upstream(response, ground_truth)
    overlong = soft_overlong_punishment(response_length, 1536, 512, 200)
    fmt = format_reward(response)
    obs, think = observe_punishment(response), think_punishment(response)
    return {
        "overall": weighted_sum(
            dict(zip(_OVERALL_ORDER, (acc, evi, overlong, fmt, obs, think), strict=True)), ONES
        ),
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
    perception = perception_paper(response, gold)
    derivation = derivation_paper(response, gold, sufficient=sufficient)
    fmt = format_reward(response)
    early, late = (perception + fmt) / 2, (derivation + fmt) / 2
    return RewardResult.weighted(
        {"perception": perception, "derivation": derivation, "format": fmt},
        dict.fromkeys(PAPER_COMPONENTS, 1.0),
        scopes={"observe": early, "evidence": early, "think": late, "answer": late},
    )


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


Scored = tuple[dict[str, float], dict[str, float]]  # component values, scope values


def _score_paper(response: str, gold: str, trajectory: Trajectory | None) -> Scored | None:
    result = paper_rewards(response, gold)
    return dict(result.components), dict(result.scopes)


def _score_upstream(response: str, gold: str, trajectory: Trajectory | None) -> Scored | None:
    if trajectory is None:
        return None  # the overlong punishment needs the response length
    scores = sum_all(response, trajectory.num_policy_tokens, gold)
    parts = {k: scores[k] for k in _OVERALL_ORDER}  # the released order of addition
    return parts, parts


@dataclass(frozen=True)
class EvisragRules:
    """One variant of EVisRAG's reward: its components, their default weights (the plain sum)
    and how a response is scored into component and scope values (None: cannot be scored)."""

    name: str
    components: tuple[str, ...]
    score: Callable[[str, str, Trajectory | None], Scored | None]

    @property
    def weights(self) -> dict[str, float]:
        return dict.fromkeys(self.components, 1.0)


EVISRAG_RULES: Registry[EvisragRules] = Registry("EVisRAG reward rules")
EVISRAG_RULES.add("paper", EvisragRules("paper", PAPER_COMPONENTS, _score_paper))
EVISRAG_RULES.add("upstream", EvisragRules("upstream", UPSTREAM_COMPONENTS, _score_upstream))


@dataclass(frozen=True)
class EvisragReward:
    """EVisRAG reward as a ``RewardFn``. paper rules: Eqs. 11-13 with Eq. 7-8 scope values.
    upstream rules: ``sum_all``'s six components, each also a scope value keyed by its reward
    name (the token span of each is given by ``evidra.rewards.scopes.UPSTREAM_SCOPE_RULES``);
    they need the trajectory for the response length of the overlong punishment. The total is
    the weighted sum of the components (default: the plain sum, as both the paper and the
    released ``overall``)."""

    rules: EvisragRules = field(default_factory=lambda: EVISRAG_RULES.get("paper"))
    weights: Mapping[str, float] = field(default_factory=dict)  # empty: every component weight 1

    def __post_init__(self) -> None:
        given = check_weights(self.weights, self.rules.components, f"evisrag.{self.rules.name}")
        object.__setattr__(self, "weights", given or self.rules.weights)

    @property
    def components(self) -> tuple[str, ...]:
        return self.rules.components

    @property
    def component_names(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def reweighted(self, weights: Mapping[str, float]) -> EvisragReward:
        return replace(self, weights={**self.weights, **weights})

    def __call__(self, parsed: Parsed, sample: Sample, trajectory: Trajectory | None = None) -> RewardResult:
        scored = self.rules.score(parsed.text, gold_string(sample), trajectory)
        if scored is None:
            return RewardResult.unscored(f"evisrag.{self.rules.name} needs the trajectory (response length)")
        values, scopes = scored
        return RewardResult.weighted(values, self.weights, scopes=scopes)


def evisrag_reward(variant: str = "paper", *, weights: Mapping[str, float] | None = None) -> EvisragReward:
    """The EVisRAG reward of a registered variant (``EVISRAG_RULES``: paper | upstream); ``weights``
    as ``EvisragReward``'s (None: every component weight 1)."""
    return EvisragReward(EVISRAG_RULES.get(variant), {} if weights is None else weights)


REWARDS.add("evisrag", evisrag_reward("paper"))
REWARDS.add("evisrag.upstream", evisrag_reward("upstream"))
for _name in PAPER_COMPONENTS:
    REWARDS.add(
        f"evisrag.{_name}",
        evisrag_reward("paper", weights=dict.fromkeys(PAPER_COMPONENTS, 0.0) | {_name: 1.0}),
    )
