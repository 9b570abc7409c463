"""Retrieval evaluation in the ViDoRe / VisRAG (BEIR) layout: queries, qrels, ranking metrics.

Files (JSONL, or TSV with a header row):

* queries: ``{"_id": "q1", "text": "..."}`` (BEIR/VisRAG) or ``{"query-id": "q1", "query": "..."}``
* qrels:   ``{"query-id": "q1", "corpus-id": "<page id>", "score": 1}`` or TSV
  ``query-id<TAB>corpus-id<TAB>score``. Scores are graded relevance; 0 means judged irrelevant.

Metrics are ``evidra.metrics.ranking``'s (trec_eval definitions): Recall@k, MRR@k, nDCG@k
(gain = relevance, log2 discount), averaged over the queries that have at least one relevant
page. Unlike ViDoRe's MTEB evaluator we do not drop hits whose id equals the query id
(its ``ignore_identical_ids`` default), since page ids never collide with query ids.

A benchmark folder can stand in for both files and for the page store (``evidra index build
--corpus``, ``index eval --benchmark``): ``detect_layout`` tells the BEIR layout (ViDoRe v2,
VisRAG: ``corpus``/``queries``/``qrels`` configs) from ViDoRe v1's QA rows (``image_filename``),
and ``benchmark_pages``/``benchmark_queries`` read them through the loaders in
``evidra.data.loaders``, so index page ids are the ids the qrels name.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Literal

from evidra.core.errors import InvalidInputError
from evidra.core.jsonvalue import as_object
from evidra.metrics.ranking import mrr_at_k, ndcg_at_k, recall_at_k
from evidra.retrieval.interfaces import Retriever, check_k
from evidra.safeio.jsonfiles import read_json_lines

if TYPE_CHECKING:
    from evidra.core.types import Page

Qrels = dict[str, dict[str, float]]
Layout = Literal["beir", "vidore_v1"]
LAYOUTS: tuple[Layout, ...] = ("beir", "vidore_v1")
_ID_KEYS = ("query-id", "_id", "query_id", "id", "qid")
_TEXT_KEYS = ("query", "text", "question")


_QUERIES_FORMAT = 'JSONL rows {"_id": ..., "text": ...} or a TSV with the header query-id<TAB>query'
_QRELS_FORMAT = (
    'JSONL rows {"query-id": ..., "corpus-id": ..., "score": ...} '
    "or a TSV with the header query-id<TAB>corpus-id<TAB>score"
)
_CORPUS_ID_KEYS = ("corpus-id", "corpus_id", "doc-id", "docid")


def _rows(path: Path, expected: str, columns: Sequence[Sequence[str]]) -> Sequence[Mapping[str, object]]:
    """The records of a JSONL/TSV/CSV file; a table's header must name one of each of ``columns``."""
    if not path.is_file():
        raise InvalidInputError(f"{str(path)!r} does not exist; pass {expected}")
    if path.suffix in (".tsv", ".csv"):
        try:
            return _table(path, expected, columns)
        except (UnicodeDecodeError, csv.Error) as exc:
            raise InvalidInputError(f"{path} is not a UTF-8 table ({exc}); expected {expected}") from None
    rows = read_json_lines(path, "file", fix=f"pass {expected}")
    return [as_object(row, f"{path} line {n} (expected {expected})") for n, row in rows]


def _table(path: Path, expected: str, columns: Sequence[Sequence[str]]) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f, delimiter="\t" if path.suffix == ".tsv" else ",")
        header = reader.fieldnames or []
        if not all(any(k in header for k in keys) for keys in columns):
            raise InvalidInputError(
                f"{path}: the first line {header!r:.80} is not a header naming the columns; "
                f"expected {expected}"
            )
        return list(reader)


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
    rows = _rows(p, _QUERIES_FORMAT, (_ID_KEYS, _TEXT_KEYS))
    if not rows:
        raise InvalidInputError(f"{p} holds no queries; expected {_QUERIES_FORMAT}")
    return {_field(r, _ID_KEYS, p, "query id"): _field(r, _TEXT_KEYS, p, "query text") for r in rows}


def load_qrels(path: str | Path) -> Qrels:
    """``query id -> {page id: relevance}`` from a qrels file."""
    p = Path(path)
    out: Qrels = {}
    rows = _rows(p, _QRELS_FORMAT, (_ID_KEYS, _CORPUS_ID_KEYS))
    if not rows:
        raise InvalidInputError(f"{p} holds no judgements; expected {_QRELS_FORMAT}")
    for row in rows:
        qid = _field(row, _ID_KEYS, p, "query id")
        doc = _field(row, _CORPUS_ID_KEYS, p, "corpus id")
        score = _number(row.get("score", 1))
        if score is None:
            raise InvalidInputError(f"{p}: relevance {row.get('score')!r} of ({qid}, {doc}) is not a number")
        out.setdefault(qid, {})[doc] = score
    return out


def _number(value: object) -> float | None:
    """``value`` as a float (a JSON number, or a table's text); None when it is none."""
    if not isinstance(value, (int, float, str)):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def check_judged(queries: Mapping[str, str], qrels: Qrels, source: str) -> None:
    """Raise unless some query has a relevant page in ``qrels``: scores over none would all be 0.

    >>> check_judged({"q1": "who?"}, {"q1": {"p3": 1.0}}, "queries.jsonl and qrels.tsv")
    """
    if any(s > 0 for q in queries for s in qrels.get(q, {}).values()):
        return
    if not queries or not qrels:
        raise InvalidInputError(f"{source}: no {'queries' if not queries else 'qrels'} to evaluate")
    if not any(q in qrels for q in queries):
        raise InvalidInputError(
            f"{source}: no query id has qrels (query ids {', '.join(list(queries)[:3])}; qrels query ids "
            f"{', '.join(list(qrels)[:3])}); both must use the same query ids"
        )
    raise InvalidInputError(f"{source}: the qrels judge no page of the queries relevant (every score <= 0)")


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


def judged(queries: Mapping[str, str], qrels: Qrels) -> list[str]:
    """The ids of the queries ``evaluate`` searches: those the qrels judge."""
    return [q for q in queries if q in qrels]


def evaluate(
    retriever: Retriever,
    queries: Mapping[str, str],
    qrels: Qrels,
    ks: Sequence[int] = (1, 5, 10),
    *,
    batch_size: int = 32,
    progress: Callable[[int], None] | None = None,
) -> EvalReport:
    """Search every judged query and score the rankings; ``progress(n)`` after each batch of ``n``
    queries searched (the judged ones: ``judged(queries, qrels)`` in all)."""
    ids = judged(queries, qrels)
    depth = max(ks)
    rankings: dict[str, list[str]] = {}
    for start in range(0, len(ids), batch_size):
        batch = ids[start : start + batch_size]
        for qid, hits in zip(batch, retriever.search([queries[q] for q in batch], k=depth), strict=True):
            rankings[qid] = [h.page_id for h in hits]
        if progress is not None:
            progress(len(batch))
    report = score_rankings(rankings, qrels, ks)
    missing = len(queries) - len(ids)
    return EvalReport(report.metrics, report.n_queries, report.n_skipped + missing, report.per_query)


def missing_relevant(queries: Mapping[str, str], qrels: Qrels, page_ids: Sequence[str]) -> set[str]:
    """Relevant corpus ids of the queried qrels that the index lacks: they can only count as misses."""
    have = set(page_ids)
    return {d for q in queries for d, s in qrels.get(q, {}).items() if s > 0 and d not in have}


def _field_names(file: Path) -> set[str]:
    """Column names of a record file; parquet from its schema, without reading the images."""
    from evidra.data.loaders._records import read_records

    if file.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            pass  # read_records raises the error naming the extra
        else:
            return set(pq.read_schema(file).names)
    first = next(iter(read_records(file)), None)
    return set(first.data) if first is not None else set()


def detect_layout(path: str | Path) -> Layout:
    """``beir`` if ``path`` holds a ``corpus`` config, ``vidore_v1`` if its rows have ``image_filename``."""
    from evidra.data.loaders._records import data_files

    root = Path(path)
    if not root.exists():
        raise InvalidInputError(f"benchmark path {str(root)!r} does not exist; pass a folder or file")
    if root.is_dir() and ((root / "corpus").exists() or any(root.glob("corpus.*"))):
        return "beir"
    try:
        if "image_filename" in _field_names(data_files(root)[0]):
            return "vidore_v1"
    except InvalidInputError:
        pass  # no record files, or unreadable ones: not a layout we know
    raise InvalidInputError(
        f"{str(root)!r} is not a retrieval benchmark in a known layout; expected the BEIR layout "
        "(corpus, queries and qrels files or folders: ViDoRe v2, VisRAG) or the ViDoRe v1 QA layout "
        "(JSONL/parquet rows with query, image and image_filename); or name the format explicitly"
    )


def benchmark_pages(path: str | Path, layout: Layout, *, image_dir: str | Path) -> list[Page]:
    """The corpus pages, ids as the qrels name them; inline images are written to ``image_dir``."""
    from evidra.data.loaders.beir import load_beir_corpus
    from evidra.data.loaders.vidore_v1 import load_vidore_v1_corpus

    corpus = {"beir": load_beir_corpus, "vidore_v1": load_vidore_v1_corpus}[layout]
    return corpus(path, image_dir=image_dir)


def benchmark_queries(path: str | Path, layout: Layout) -> tuple[dict[str, str], Qrels]:
    """``(queries, graded qrels)`` of a benchmark; ViDoRe v1 queries deduplicated as its loader does."""
    from evidra.data.loaders.beir import load_beir
    from evidra.data.loaders.vidore_v1 import load_vidore_v1

    samples = {"beir": load_beir, "vidore_v1": load_vidore_v1}[layout](path)
    queries = {s.id: s.question for s in samples}
    return queries, {s.id: dict(s.qrels) for s in samples}
