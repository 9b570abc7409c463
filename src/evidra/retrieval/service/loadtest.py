"""A bounded load test of the search service: concurrent clients, latency percentiles, checks.

``run_load`` starts ``clients`` asyncio clients that send single-query requests round-robin over
``queries`` until ``duration_s`` passes or ``max_requests`` were sent, and compares every answer
with ``expected`` (the retriever called directly): same page ids in the same order and scores
within ``score_tol``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evidra.retrieval.interfaces import Hit
from evidra.retrieval.service.client import AsyncSearchClient, SearchServiceError


@dataclass(frozen=True)
class LoadReport:
    requests: int
    errors: int
    mismatches: int
    duration_s: float
    p50_ms: float
    p99_ms: float
    throughput_qps: float
    max_score_diff: float

    def summary(self) -> str:
        return (
            f"{self.requests} requests in {self.duration_s:.2f} s: p50 {self.p50_ms:.1f} ms, "
            f"p99 {self.p99_ms:.1f} ms, {self.throughput_qps:.1f} queries/s, errors {self.errors}, "
            f"mismatches {self.mismatches} (max score diff {self.max_score_diff:.2e})"
        )


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100).

    >>> percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50)
    3.0
    """
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def _compare(got: list[Hit], want: list[Hit], tol: float) -> tuple[bool, float]:
    diff = max((abs(g.score - w.score) for g, w in zip(got, want, strict=False)), default=0.0)
    same = [h.page_id for h in got] == [h.page_id for h in want] and diff <= tol
    return same, diff


async def run_load(
    url: str,
    queries: Sequence[str],
    expected: Mapping[str, list[Hit]],
    *,
    k: int,
    clients: int = 8,
    duration_s: float = 2.0,
    max_requests: int = 400,
    timeout_s: float = 30.0,
    score_tol: float = 1e-4,
) -> LoadReport:
    latencies: list[float] = []
    counters = {"sent": 0, "errors": 0, "mismatches": 0}
    worst = [0.0]
    stop_at = time.perf_counter() + duration_s

    async def client(offset: int) -> None:
        async with AsyncSearchClient(url, timeout=timeout_s) as c:
            i = offset
            while time.perf_counter() < stop_at and counters["sent"] < max_requests:
                counters["sent"] += 1
                query = queries[i % len(queries)]
                i += clients
                t0 = time.perf_counter()
                try:
                    got = (await c.search([query], k=k))[0]
                except SearchServiceError:
                    counters["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - t0)
                same, diff = _compare(got, expected[query], score_tol)
                worst[0] = max(worst[0], diff)
                counters["mismatches"] += not same

    start = time.perf_counter()
    await asyncio.gather(*(client(n) for n in range(clients)))
    elapsed = time.perf_counter() - start
    return LoadReport(
        requests=counters["sent"],
        errors=counters["errors"],
        mismatches=counters["mismatches"],
        duration_s=elapsed,
        p50_ms=percentile(latencies, 50) * 1000,
        p99_ms=percentile(latencies, 99) * 1000,
        throughput_qps=len(latencies) / elapsed if elapsed > 0 else 0.0,
        max_score_diff=worst[0],
    )
