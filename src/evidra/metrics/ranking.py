"""Ranking metrics for retrieval rewards and retrieval evaluation.

Two families live here:

* VRAG-RL's retrieval-efficiency reward (VRAG-RL Eq. 7-9): the pages a trajectory inserted
  into its context, in order, scored as an NDCG against the gold pages. ``vragrl_ndcg`` is the
  paper's definition over *distinct* pages; ``vragrl_ndcg_upstream`` reproduces the released
  ``rm.py`` (duplicates each count, the ideal list is not truncated to the retrieved length).
* Standard IR metrics following trec_eval / pytrec_eval conventions (used by ViDoRe, ViDoSeek,
  OpenDocVQA): graded gain = relevance, discount ``log2(rank + 1)``, the ideal ranking is the
  qrels sorted by relevance, documents with relevance <= 0 are not relevant.

All functions are pure and never raise on empty input: an empty gold set scores 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from evidra.core.errors import InvalidInputError


def _check_k(k: int | None) -> None:
    if k is not None and (not isinstance(k, int) or k < 1):
        raise InvalidInputError(f"cutoff k must be a positive int or None, got {k!r}")


def _dcg(gains: Sequence[float]) -> float:
    """Sum of ``gain_i / log2(i + 1)`` with ranks ``i`` starting at 1 (VRAG-RL Eq. 7)."""
    return sum(g / math.log2(i + 1) for i, g in enumerate(gains, start=1))


def vragrl_ndcg(retrieved: Sequence[str], gold: Sequence[str]) -> float:
    """VRAG-RL Eq. 7-9 over distinct pages: ``DCG(D_trj) / IDCG(D_rel)``.

    ``s_i = 1`` if page ``i`` is gold, so the gain ``2^s - 1`` is 1 or 0. A page retrieved
    twice counts once (at its first rank) and the gold set is deduplicated, so the value
    stays in [0, 1]; the released code differs, see ``vragrl_ndcg_upstream``.

    >>> vragrl_ndcg(["a", "b"], ["b"])  # gold at rank 2: 1/log2(3)
    0.6309297535714575
    >>> vragrl_ndcg(["b", "b"], ["b"])
    1.0
    """
    gold_set = set(gold)
    if not gold_set:
        return 0.0
    seen: set[str] = set()
    gains: list[float] = []
    for doc in retrieved:
        if doc in seen:
            continue
        seen.add(doc)
        gains.append(1.0 if doc in gold_set else 0.0)
    idcg = _dcg([1.0] * len(gold_set))  # VRAG-RL Eq. 8: unrelated docs add 2^0 - 1 = 0
    return _dcg(gains) / idcg


def vragrl_ndcg_upstream(retrieved: Sequence[object], gold: Sequence[object]) -> float:
    """The released ``ndcg(sorted_docs, golden_answer_list)`` of VRAG-RL's ``rm.py``.

    Relevance is membership, so every duplicate of a gold page scores again; the ideal list is
    ``[1] * len(gold) + [0] * (len(retrieved) - len(gold))``, neither deduplicated nor cut to
    the retrieved length. Values above 1 are possible with duplicate retrievals.

    >>> round(vragrl_ndcg_upstream(["d_1", "d_2"], ["d_1", "d_1"]), 6)
    0.613147
    """
    gains = [1.0 if doc in gold else 0.0 for doc in retrieved]
    idcg = _dcg([1.0] * len(gold))
    if idcg == 0:
        return 0.0
    return _dcg(gains) / idcg


def _relevant(qrels: Mapping[str, float]) -> dict[str, float]:
    return {doc: float(rel) for doc, rel in qrels.items() if rel > 0}


def _cut(ranking: Sequence[str], k: int | None) -> Sequence[str]:
    _check_k(k)
    return ranking if k is None else ranking[:k]


def _as_qrels(gold: Mapping[str, float] | Sequence[str]) -> dict[str, float]:
    if isinstance(gold, Mapping):
        return _relevant(gold)
    return {doc: 1.0 for doc in gold}


def _dedup(ranking: Sequence[str]) -> list[str]:
    """trec_eval scores each document once; a repeated id keeps its first rank."""
    seen: set[str] = set()
    out: list[str] = []
    for doc in ranking:
        if doc not in seen:
            seen.add(doc)
            out.append(doc)
    return out


def ndcg_at_k(
    ranking: Sequence[str], gold: Mapping[str, float] | Sequence[str], k: int | None = None
) -> float:
    """nDCG@k as trec_eval's ``ndcg_cut``: gain = rel, discount log2(rank + 1).

    The ideal DCG sorts all judged-relevant qrels by relevance and cuts at ``k`` too.
    ``gold`` is a qrels mapping ``doc -> graded relevance`` or a sequence of relevant ids.

    >>> round(ndcg_at_k(["x", "a", "b"], {"a": 2, "b": 1}, k=3), 4)  # (2/log2 3 + 1/2) / (2 + 1/log2 3)
    0.6697
    """
    qrels = _as_qrels(gold)
    if not qrels:
        return 0.0
    ranked = _cut(_dedup(ranking), k)
    dcg = _dcg([qrels.get(doc, 0.0) for doc in ranked])
    ideal = sorted(qrels.values(), reverse=True)
    idcg = _dcg(ideal if k is None else ideal[:k])
    return dcg / idcg


def recall_at_k(
    ranking: Sequence[str], gold: Mapping[str, float] | Sequence[str], k: int | None = None
) -> float:
    """Fraction of relevant documents found in the top ``k`` (trec_eval ``recall``).

    >>> recall_at_k(["a", "x", "b"], ["a", "b", "c"], k=2)
    0.3333333333333333
    """
    qrels = _as_qrels(gold)
    if not qrels:
        return 0.0
    found = {doc for doc in _cut(_dedup(ranking), k) if doc in qrels}
    return len(found) / len(qrels)


def mrr_at_k(
    ranking: Sequence[str], gold: Mapping[str, float] | Sequence[str], k: int | None = None
) -> float:
    """Reciprocal rank of the first relevant document within the top ``k`` (0 if none).

    >>> mrr_at_k(["x", "y", "a"], ["a"], k=10)
    0.3333333333333333
    """
    qrels = _as_qrels(gold)
    for rank, doc in enumerate(_cut(_dedup(ranking), k), start=1):
        if doc in qrels:
            return 1.0 / rank
    return 0.0


def hit_rate_at_k(
    ranking: Sequence[str], gold: Mapping[str, float] | Sequence[str], k: int | None = None
) -> float:
    """1.0 if any relevant document is in the top ``k``, else 0.0.

    >>> hit_rate_at_k(["x", "a"], ["a"], k=1)
    0.0
    """
    qrels = _as_qrels(gold)
    return 1.0 if any(doc in qrels for doc in _cut(ranking, k)) else 0.0


def precision_at_k(ranking: Sequence[str], gold: Mapping[str, float] | Sequence[str], k: int) -> float:
    """Relevant documents in the top ``k`` divided by ``k`` (trec_eval ``P_k``).

    >>> precision_at_k(["a", "x"], ["a"], k=4)
    0.25
    """
    _check_k(k)
    qrels = _as_qrels(gold)
    return sum(1 for doc in _dedup(ranking)[:k] if doc in qrels) / k
