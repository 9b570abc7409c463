"""The registry of benchmark answer metrics that evaluation tables report, with their metadata.

The metrics themselves are pure functions of strings in ``evidra.metrics`` (``anls``: Levenshtein,
ANLS; ``mmlongbench``: MMLongBench-Doc; ``qa``: ChartQA, SlideVQA, VisRAG), below both the rewards
and evaluation. Here each is registered in ``METRICS`` with how to report it (higher_is_better,
aggregation), so tables pick metrics by name; ``METRICS`` is filled on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from evidra.core.registry import Registry
from evidra.metrics.anls import anls, anls_vrag_upstream, levenshtein
from evidra.metrics.mmlongbench import mmlongbench_score
from evidra.metrics.qa import relaxed_accuracy, slidevqa_em, slidevqa_f1, visrag_accuracy

# --- registry -------------------------------------------------------------------------------------

Aggregation = Literal["mean", "f1"]


@dataclass(frozen=True)
class Metric:
    """A per-item metric plus how to report it over a dataset."""

    fn: Callable[..., float]
    higher_is_better: bool = True
    aggregation: Aggregation = "mean"
    benchmark: str = ""


METRICS: Registry[Metric] = Registry("metric")
METRICS.add("anls", Metric(anls, benchmark="DocVQA/InfoVQA/MP-DocVQA (lmms-eval edge)"))
METRICS.add("anls_mmlongbench", Metric(lambda p, a: anls(p, a, edge="zero"), benchmark="MMLongBench-Doc"))
METRICS.add("anls_vrag_upstream", Metric(anls_vrag_upstream, benchmark="VRAG-RL vrag.py"))
METRICS.add("relaxed_accuracy", Metric(relaxed_accuracy, benchmark="ChartQA"))
METRICS.add("mmlongbench_score", Metric(mmlongbench_score, aggregation="f1", benchmark="MMLongBench-Doc"))
METRICS.add("slidevqa_em", Metric(slidevqa_em, benchmark="SlideVQA"))
METRICS.add("slidevqa_f1", Metric(slidevqa_f1, benchmark="SlideVQA"))
METRICS.add("visrag_accuracy", Metric(visrag_accuracy, benchmark="VisRAG eval sets"))
METRICS.add("levenshtein", Metric(lambda a, b: float(levenshtein(a, b)), higher_is_better=False))
