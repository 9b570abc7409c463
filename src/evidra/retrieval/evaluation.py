"""Retrieval evaluation in the ViDoRe / VisRAG (BEIR) layout: queries, qrels, ranking metrics.

Files (JSONL, or TSV with a header row):

* queries: ``{"_id": "q1", "text": "..."}`` (BEIR/VisRAG) or ``{"query-id": "q1", "query": "..."}``
* qrels:   ``{"query-id": "q1", "corpus-id": "<page id>", "score": 1}`` or TSV
  ``query-id<TAB>corpus-id<TAB>score``. Scores are graded relevance; 0 means judged irrelevant.

Metrics are ``evidra.rewards.ranking``'s (trec_eval definitions): Recall@k, MRR@k, nDCG@k
(gain = relevance, log2 discount), averaged over the queries that have at least one relevant
page. Unlike ViDoRe's MTEB evaluator we do not drop hits whose id equals the query id
(its ``ignore_identical_ids`` default, RETRIEVAL.md §2), since page ids never collide with query ids.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType

from evidra.errors import InvalidInputError
from evidra.retrieval.base import Retriever, check_k
from evidra.rewards.ranking import mrr_at_k, ndcg_at_k, recall_at_k

Qrels = dict[str, dict[str, float]]
_ID_KEYS = ("query-id", "_id", "query_id", "id", "qid")
_TEXT_KEYS = ("query", "text", "question")


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        raise InvalidInputError(f"{str(path)!r} does not exist; pass a JSONL or TSV file")
    if path.suffix in (".tsv", ".csv"):
        with path.open(newline="") as f:
            return list(csv.DictReader(f, delimiter="\t" if path.suffix == ".tsv" else ","))
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise InvalidInputError(f"{path}:{n} is not valid JSON ({exc.msg})") from None
    return rows


def _field(row: Mapping[str, object], keys: Sequence[str], path: Path, what: str) -> str:
    for key in keys:
        if key in row and row[key] is not None:
            return str(row[key])
    raise InvalidInputError(
        f"{path}: a row has no {what} field (one of {', '.join(keys)}): {dict(row)!r:.120}"
    )


def load_queries(path: str | Path) -> dict[str, str]:
    """``query id -> text`` from a queries file."""
    p = Path(path)
    return {_field(r, _ID_KEYS, p, "query id"): _field(r, _TEXT_KEYS, p, "query text") for r in _rows(p)}


def load_qrels(path: str | Path) -> Qrels:
    """``query id -> {page id: relevance}`` from a qrels file."""
    p = Path(path)
    out: Qrels = {}
    for row in _rows(p):
        qid = _field(row, _ID_KEYS, p, "query id")
        doc = _field(row, ("corpus-id", "corpus_id", "doc-id", "docid"), p, "corpus id")
        try:
            score = float(row.get("score", 1))
        except (TypeError, ValueError):
            raise InvalidInputError(
                f"{p}: relevance {row.get('score')!r} of ({qid}, {doc}) is not a number"
            ) from None
        out.setdefault(qid, {})[doc] = score
    return out


@dataclass(frozen=True)
class EvalReport:
    """Mean metrics (``recall@5``, ``mrr@10``, ``ndcg@5`` ...) over ``n_queries`` judged queries."""

    metrics: Mapping[str, float]
    n_queries: int
    n_skipped: int = 0  # queries without any relevant page, or without qrels
    per_query: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "metrics", MappingProxyType(dict(self.metrics)))
        object.__setattr__(self, "per_query", MappingProxyType(dict(self.per_query)))


def score_rankings(
    rankings: Mapping[str, Sequence[str]], qrels: Qrels, ks: Sequence[int] = (1, 5, 10)
) -> EvalReport:
    """Metrics of given rankings (``query id -> page ids, best first``) against ``qrels``."""
    for k in ks:
        check_k(k)
    per_query: dict[str, dict[str, float]] = {}
    skipped = 0
    for qid, ranking in rankings.items():
        gold = {d: s for d, s in qrels.get(qid, {}).items() if s > 0}
        if not gold:
            skipped += 1
            continue
        row: dict[str, float] = {}
        for k in ks:
            row[f"recall@{k}"] = recall_at_k(ranking, gold, k)
            row[f"mrr@{k}"] = mrr_at_k(ranking, gold, k)
            row[f"ndcg@{k}"] = ndcg_at_k(ranking, gold, k)
        per_query[qid] = row
    names = [f"{m}@{k}" for k in ks for m in ("recall", "mrr", "ndcg")]
    n = len(per_query)
    means = {name: (sum(r[name] for r in per_query.values()) / n if n else 0.0) for name in names}
    return EvalReport(means, n, skipped, per_query)


def evaluate(
    retriever: Retriever,
    queries: Mapping[str, str],
    qrels: Qrels,
    ks: Sequence[int] = (1, 5, 10),
    *,
    batch_size: int = 32,
) -> EvalReport:
    """Search every judged query and score the rankings."""
    ids = [q for q in queries if q in qrels]
    depth = max(ks)
    rankings: dict[str, list[str]] = {}
    for start in range(0, len(ids), batch_size):
        batch = ids[start : start + batch_size]
        for qid, hits in zip(batch, retriever.search([queries[q] for q in batch], k=depth), strict=True):
            rankings[qid] = [h.page_id for h in hits]
    report = score_rankings(rankings, qrels, ks)
    missing = len(queries) - len(ids)
    return EvalReport(report.metrics, report.n_queries, report.n_skipped + missing, report.per_query)
