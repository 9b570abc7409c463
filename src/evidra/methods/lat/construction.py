"""LAT Stage I distillation filter (§3.2): the teacher writes CoE traces for the CoE prompt (the paper
used Gemini 2.5 Pro with two CoE exemplars, pass them as ``exemplars``); keep traces whose answer
recall |a ∩ a_gt| / |a_gt| (LAT Eq. 2) reaches ``gamma``. The paper gives no value for gamma; 0.5 is
our default. (The paper then verifies boxes by hand, which is not automated.)"""

from __future__ import annotations

from evidra.core.types import Sample
from evidra.data.construction.distill import DistillContext, Verdict
from evidra.metrics.text import is_no_answer, normalize_lat, token_recall


def lat_filter(sample: Sample, text: str, ctx: DistillContext) -> Verdict:
    answer = ctx.paradigm.parse(text).answer or ""
    if not sample.answerable:
        return Verdict(is_no_answer(answer), text, {"recall": float(is_no_answer(answer))})
    recall = max((token_recall(normalize_lat(answer), normalize_lat(g)) for g in sample.answers), default=0.0)
    return Verdict(recall >= ctx.gamma, text, {"recall": recall})  # LAT Eq. 2, "recall above gamma"
