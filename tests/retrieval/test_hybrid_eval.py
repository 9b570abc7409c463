from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from evidra.core.errors import InvalidInputError
from evidra.eval.retrieval import evaluate, judged, load_qrels, load_queries, score_rankings
from evidra.retrieval.hybrid import Fusion, HybridRetriever, rrf_fuse
from evidra.retrieval.interfaces import Exclude, Hit


class Fixed:
    """A retriever that returns a fixed ranking for every query."""

    def __init__(self, ids: Sequence[str]) -> None:
        self.ids = list(ids)

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        skip = exclude or [()] * len(queries)
        return [[Hit(p, 1.0, f"{p}.png") for p in self.ids if p not in s][:k] for s in skip]


def test_rrf_hand_computed() -> None:
    a = [Hit("x", 9.0), Hit("y", 8.0), Hit("z", 7.0)]
    b = [Hit("z", 0.9), Hit("x", 0.5)]
    fused = rrf_fuse([a, b], k=60)
    # x: 1/61 + 1/62 = 0.032522; z: 1/63 + 1/61 = 0.032266; y: 1/62 = 0.016129
    assert [(h.page_id, round(h.score, 6)) for h in fused] == [
        ("x", 0.032522),
        ("z", 0.032266),
        ("y", 0.016129),
    ]
    weighted = rrf_fuse([a, b], k=0, weights=[1.0, 3.0])  # x: 1 + 3/2, z: 1/3 + 3, y: 1/2
    assert [(h.page_id, round(h.score, 4)) for h in weighted] == [("z", 3.3333), ("x", 2.5), ("y", 0.5)]


def test_rrf_retriever_passes_exclusions_and_cuts_k() -> None:
    rrf = HybridRetriever((Fixed(["a", "b", "c"]), Fixed(["c", "b", "a"])), Fusion("rrf", depth=2))
    hits = rrf.search(["q"], k=2, exclude=[{"b"}])[0]
    # without b each list is [a, c] / [c, a]: a = c = 1/61 + 1/62; first seen (a) wins the tie
    assert [h.page_id for h in hits] == ["a", "c"] and hits[0].image_path == "a.png"
    with pytest.raises(InvalidInputError, match="two or more"):
        HybridRetriever((Fixed(["a"]),))


def test_metrics_hand_computed() -> None:
    qrels = {"q1": {"a": 1.0, "b": 1.0}, "q2": {"c": 2.0, "z": 0.0}, "q3": {"n": 0.0}}
    report = score_rankings({"q1": ["x", "a", "y", "b"], "q2": ["c"], "q3": ["n"]}, qrels, ks=(1, 2))
    # q1: recall@1 0, recall@2 1/2, mrr@2 1/2, ndcg@2 = (1/log2 3) / (1 + 1/log2 3) = 0.386853
    # q2: every metric 1; q3 has no relevant page and is skipped
    assert report.n_queries == 2 and report.n_skipped == 1
    assert report.metrics["recall@1"] == pytest.approx(0.5)
    assert report.metrics["recall@2"] == pytest.approx(0.75)
    assert report.metrics["mrr@2"] == pytest.approx(0.75)
    assert report.metrics["ndcg@2"] == pytest.approx((0.386853 + 1) / 2, abs=1e-6)


def test_qrels_and_queries_in_both_layouts(tmp_path: Path) -> None:
    (tmp_path / "q.jsonl").write_text(json.dumps({"_id": "q1", "text": "alpha"}) + "\n\n")
    (tmp_path / "q2.jsonl").write_text(json.dumps({"query-id": "q1", "query": "alpha"}) + "\n")
    (tmp_path / "r.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\nq1\tb\t2\n")
    (tmp_path / "r.jsonl").write_text(
        "\n".join(json.dumps({"query-id": "q1", "corpus-id": d, "score": s}) for d, s in (("a", 1), ("b", 2)))
    )
    assert load_queries(tmp_path / "q.jsonl") == load_queries(tmp_path / "q2.jsonl") == {"q1": "alpha"}
    assert load_qrels(tmp_path / "r.tsv") == load_qrels(tmp_path / "r.jsonl") == {"q1": {"a": 1.0, "b": 2.0}}
    report = evaluate(
        Fixed(["b", "a"]), {"q1": "alpha", "q9": "unjudged"}, load_qrels(tmp_path / "r.tsv"), ks=(1,)
    )
    # ideal order b (2), a (1) equals the ranking: ndcg 1; q9 has no qrels
    assert report.metrics["ndcg@1"] == 1.0 and report.n_skipped == 1
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    with pytest.raises(InvalidInputError, match=r"bad\.jsonl' line 1 is not JSON"):
        load_qrels(tmp_path / "bad.jsonl")
    with pytest.raises(InvalidInputError, match="corpus id"):
        load_qrels(tmp_path / "q.jsonl")


def test_package_exports_are_lazy_and_complete() -> None:
    import evidra.retrieval as retrieval
    from evidra.retrieval import hybrid, interfaces

    assert retrieval.Hit is interfaces.Hit and retrieval.HybridRetriever is hybrid.HybridRetriever
    assert all(getattr(retrieval, name) is not None for name in retrieval.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = retrieval.nope


def test_evaluate_reports_progress_per_batch_of_judged_queries() -> None:
    queries = {f"q{i}": f"text {i}" for i in range(6)}  # q5 has no judgement: never searched
    qrels = {f"q{i}": {"a": 1.0} for i in range(5)}
    steps: list[int] = []
    report = evaluate(Fixed(["a", "b"]), queries, qrels, ks=(1,), batch_size=2, progress=steps.append)
    assert judged(queries, qrels) == ["q0", "q1", "q2", "q3", "q4"]
    assert steps == [2, 2, 1]  # five judged queries in batches of two
    assert report.n_queries == 5 and report.n_skipped == 1
