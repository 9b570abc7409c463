"""LAT's evaluation-only metric: stepwise attribution (SA) of the final turn, opt-in because it needs a
retriever model (``evidra eval --method lat --sa-retriever ...``)."""

from __future__ import annotations

from evidra.core.types import Sample
from evidra.eval.sample_scoring import ExtraScorer, Prediction
from evidra.methods.lat.rules import Similarity, stepwise_attribution


def stepwise_attribution_scorer(similarity: Similarity) -> ExtraScorer:
    """LAT's SA metric (R_step without the accuracy gate, tau = 0.3; LAT §5.1) of the final turn.

    ``similarity`` scores (crop, step text) pairs, e.g. ColQwen2 cosine (``evidra.methods.lat.similarity``);
    it needs a retriever model, so SA is opt-in: pass the scorer to ``run_eval(extra_scores=...)``.
    """

    def sa(sample: Sample, p: Prediction) -> dict[str, float]:
        if not p.texts:
            return {"sa": 0.0}
        images = [page.open_image() for page in sample.pages]
        return {"sa": stepwise_attribution(p.texts[-1], images, similarity, single_image=len(images) == 1)}

    return sa
