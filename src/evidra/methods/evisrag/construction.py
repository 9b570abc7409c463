"""EVisRAG's distillation filter (App. A.1): keep trajectories that reach the right answer (EVisRAG's
``acc``: gold tokens contained in the prediction; "insufficient to answer" for insufficient context)
and store their ``<evidence>`` block as the gold evidence."""

from __future__ import annotations

from evidra.core.types import Sample
from evidra.data.construction.distill import DistillContext, Verdict
from evidra.methods.evisrag.reward import split_block
from evidra.metrics.qa import evaluate_predictions
from evidra.metrics.text import INSUFFICIENT_ANSWER


def evisrag_filter(sample: Sample, text: str, ctx: DistillContext) -> Verdict:
    answer = ctx.paradigm.parse(text).answer or ""
    insufficient = sample.sufficient is False or not sample.answerable
    golds = [INSUFFICIENT_ANSWER] if insufficient else list(sample.answers)
    ok = bool(evaluate_predictions(answer, golds)["acc"])
    return Verdict(ok, text, {"evidence": split_block(text, "evidence")})
