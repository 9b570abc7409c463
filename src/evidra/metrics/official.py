"""The official answer metric of each benchmark, by dataset name.

``official(sample, prediction, answer_page)`` scores a predicted answer the way the sample's
benchmark scores it (``OFFICIAL``, registered per dataset name): ``anls`` for DocVQA, ANLS plus
APPA (the answer page) for MP-DocVQA, ``relaxed_accuracy`` for ChartQA, and so on; datasets
without a registered metric get normalised exact match. Evaluation and data construction
(difficulty filtering) both score answers with it, so it sits below them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from evidra.core.registry import Registry
from evidra.core.types import Sample
from evidra.metrics.anls import anls
from evidra.metrics.mmlongbench import MMLONGBENCH_FORMATS, mmlongbench_score
from evidra.metrics.qa import relaxed_accuracy, slidevqa_em, slidevqa_f1, visrag_accuracy
from evidra.metrics.text import braced_answer, normalize_squad

AnswerMetric = Callable[[Sample, str, int | None], dict[str, float]]
OFFICIAL: Registry[AnswerMetric] = Registry("official benchmark metric")


def _best(fn: Callable[[str, str], float], pred: str, answers: Sequence[str]) -> float:
    return max((fn(pred, a) for a in answers), default=0.0)


def _anls(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    return {"anls": anls(pred, s.answers)}


def _mpdocvqa(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    """ANLS plus APPA: the predicted answer page is the gold page (MP-DocVQA)."""
    gold = {s.page_index(g) for g in s.gold_pages}
    out = {"anls": 0.0 if pred.strip().lower() in ("", "none") else anls(pred, s.answers)}
    out["appa"] = float(answer_page in gold) if gold else 0.0
    return out


def _chartqa(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    return {"relaxed_accuracy": _best(relaxed_accuracy, pred, s.answers)}


def _slidevqa(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    return {
        "slidevqa_em": _best(lambda x, a: slidevqa_em(x, a, s.question), pred, s.answers),
        "slidevqa_f1": _best(lambda x, a: slidevqa_f1(x, a, s.question), pred, s.answers),
    }


def _mmlongbench(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    fmt = MMLONGBENCH_FORMATS.get(s.answer_type or "str", "Str")
    return {"mmlongbench_score": mmlongbench_score(s.answers[0] if s.answers else "", pred, fmt)}


def _visrag(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    return {"visrag_accuracy": visrag_accuracy(pred, s.answers, str(s.extras.get("source", "")))}


def _exact(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    """Synthetic benchmarks: normalised exact match against any gold answer."""
    return {"exact_match": float(any(normalize_squad(pred) == normalize_squad(a) for a in s.answers))}


for _name in ("docvqa", "infovqa"):
    OFFICIAL.add(_name, _anls)
OFFICIAL.add("mpdocvqa", _mpdocvqa)
OFFICIAL.add("chartqa", _chartqa)
OFFICIAL.add("slidevqa", _slidevqa)
OFFICIAL.add("mmlongbench", _mmlongbench)
for _name in ("visrag", "vidore", "beir"):
    OFFICIAL.add(_name, _visrag)
OFFICIAL.add("exact", _exact)


def _synthetic(s: Sample, pred: str, answer_page: int | None) -> dict[str, float]:
    """Tunnel Vision / TRACER-style accuracy: braces extraction, case-insensitive equality
    (the suite lowercases colours and yes/no and uppercases component names)."""
    got = braced_answer(pred).casefold()
    return {"synthetic_accuracy": float(any(got == a.strip().casefold() for a in s.answers))}


for _name in (
    "tunnel_chain",
    "tunnel_circuits",
    "tunnel_objreid",
    "tracer_vjump",
    "tracer_trace",
    "tracer_match",
    "tracer_subimage",
):
    OFFICIAL.add(_name, _synthetic)


def official(sample: Sample, pred: str, answer_page: int | None = None) -> dict[str, float]:
    """The sample's benchmark metric; ``exact`` for datasets without a registered one."""
    name = sample.dataset if sample.dataset in OFFICIAL else "exact"
    return OFFICIAL.get(name)(sample, pred, answer_page)
