"""Official answer metrics of the document-VQA benchmarks (each benchmark's official scorer).

Every metric is a pure function of strings with its benchmark's own normalisation, and is
registered in ``METRICS`` with its metadata (higher_is_better, aggregation), so evaluation
tables pick metrics by name. Nothing here calls ``eval``: MMLongBench-Doc's list answers are
parsed with ``ast.literal_eval`` / ``json`` and fall back to a plain string.

The metric families live one per module: ``metrics_anls`` (Levenshtein, ANLS),
``metrics_mmlongbench`` (MMLongBench-Doc) and ``metrics_qa`` (ChartQA, SlideVQA, VisRAG).
This module is the registry and re-exports them all; ``METRICS`` is filled on its import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

# Re-exports: callers import every metric from this module, wherever it is defined.
from evidra.eval.metrics_anls import Edge as Edge
from evidra.eval.metrics_anls import _anls_value as _anls_value
from evidra.eval.metrics_anls import anls as anls
from evidra.eval.metrics_anls import anls_vrag_upstream as anls_vrag_upstream
from evidra.eval.metrics_anls import levenshtein as levenshtein
from evidra.eval.metrics_anls import normalize_docvqa as normalize_docvqa
from evidra.eval.metrics_anls import normalized_levenshtein as normalized_levenshtein
from evidra.eval.metrics_mmlongbench import _EXACT_PATTERNS as _EXACT_PATTERNS
from evidra.eval.metrics_mmlongbench import NOT_ANSWERABLE as NOT_ANSWERABLE
from evidra.eval.metrics_mmlongbench import ScoredAnswer as ScoredAnswer
from evidra.eval.metrics_mmlongbench import _as_list as _as_list
from evidra.eval.metrics_mmlongbench import _decimals as _decimals
from evidra.eval.metrics_mmlongbench import _float_equal as _float_equal
from evidra.eval.metrics_mmlongbench import _mmlb_anls as _mmlb_anls
from evidra.eval.metrics_mmlongbench import _score_list as _score_list
from evidra.eval.metrics_mmlongbench import mmlongbench_acc_f1 as mmlongbench_acc_f1
from evidra.eval.metrics_mmlongbench import mmlongbench_clean as mmlongbench_clean
from evidra.eval.metrics_mmlongbench import mmlongbench_is_exact_type as mmlongbench_is_exact_type
from evidra.eval.metrics_mmlongbench import mmlongbench_score as mmlongbench_score
from evidra.eval.metrics_qa import _ARTICLES as _ARTICLES
from evidra.eval.metrics_qa import _COMMA_STRIP as _COMMA_STRIP
from evidra.eval.metrics_qa import _CONTRACTIONS as _CONTRACTIONS
from evidra.eval.metrics_qa import _NUMBER_WORDS as _NUMBER_WORDS
from evidra.eval.metrics_qa import _PERIOD_STRIP as _PERIOD_STRIP
from evidra.eval.metrics_qa import _PUNCT as _PUNCT
from evidra.eval.metrics_qa import _SLIDEVQA_NUMBERS as _SLIDEVQA_NUMBERS
from evidra.eval.metrics_qa import _SLIDEVQA_REWRITES as _SLIDEVQA_REWRITES
from evidra.eval.metrics_qa import _VQA_NUMBERS as _VQA_NUMBERS
from evidra.eval.metrics_qa import _VQA_PUNCT as _VQA_PUNCT
from evidra.eval.metrics_qa import _drop_one_sided_percent as _drop_one_sided_percent
from evidra.eval.metrics_qa import _first_letter as _first_letter
from evidra.eval.metrics_qa import _remove_unit as _remove_unit
from evidra.eval.metrics_qa import _to_float as _to_float
from evidra.eval.metrics_qa import normalize_slidevqa as normalize_slidevqa
from evidra.eval.metrics_qa import normalize_vqa as normalize_vqa
from evidra.eval.metrics_qa import relaxed_accuracy as relaxed_accuracy
from evidra.eval.metrics_qa import slidevqa_em as slidevqa_em
from evidra.eval.metrics_qa import slidevqa_f1 as slidevqa_f1
from evidra.eval.metrics_qa import token_f1 as token_f1
from evidra.eval.metrics_qa import visrag_accuracy as visrag_accuracy
from evidra.registry import Registry

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
