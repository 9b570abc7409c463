"""``serve-index`` under an abusive client: how a normal client fares beside one that floods it.

A BM25 index over synthetic pages is served in-process (``SearchService``). A normal client
sends one-query searches back to back for ``--seconds``, first alone (the baseline), then while
abusive clients send the largest allowed requests (``max_queries`` queries each), oversized
requests (refused with 413) and large requests they abandon mid-flight. Prints requests served,
p50/p99 latency of the normal client in both runs and their ratio, and how the search thread
spent its time: wall vs. CPU milliseconds per query (wall far above CPU means it waited for the
GIL or for a core).

``--retriever sleep`` swaps BM25 for a stand-in that costs as much per query (timed on 32 BM25
queries at startup, or ``--sleep-ms``) but sleeps, releasing the GIL: the same queueing, no
interpreter contention.

    python benchmarks/serve_abuse.py --pages 10000 --seconds 10 [--retriever sleep] [--max-batch 32]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import platform
import random
import socket
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from evidra.retrieval.base import Exclude, Hit, Retriever
from evidra.retrieval.client import SearchClient, SearchServiceError
from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.server import SearchService, ServiceOptions

WORDS = [f"w{i}" for i in range(5000)]


def _index(pages: int, seed: int = 0) -> BM25Retriever:
    rng = random.Random(seed)
    texts = {f"p{i:06d}": " ".join(rng.choices(WORDS, k=120)) for i in range(pages)}
    return BM25Retriever.build(texts)


class _Sleepy:
    """Costs ``per_query_s`` per query like BM25, but sleeping (the GIL is free meanwhile)."""

    def __init__(self, per_query_s: float) -> None:
        self.per_query_s = per_query_s

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        time.sleep(self.per_query_s * len(queries))
        return [[Hit(f"p{i:06d}", 1.0, "") for i in range(k)] for _ in queries]


class _Timed:
    """Records each search call's queries, wall seconds and CPU seconds of the calling thread."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.calls: list[tuple[int, float, float]] = []

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        wall, cpu = time.perf_counter(), time.thread_time()
        hits = self.inner.search(queries, k=k, exclude=exclude)
        self.calls.append((len(queries), time.perf_counter() - wall, time.thread_time() - cpu))
        return hits

    def summary(self, calls: list[tuple[int, float, float]], seconds: float, process_cpu: float) -> str:
        """``process_cpu``: CPU seconds of this whole process (server and normal client) meanwhile;
        near 100% of one core means the GIL, which lets one thread run Python at a time, is full."""
        n = sum(c[0] for c in calls) or 1
        wall, cpu = sum(c[1] for c in calls), sum(c[2] for c in calls)
        rest = process_cpu - cpu
        return (f"search thread: {len(calls)} calls, {n / max(len(calls), 1):.1f} queries/call, "
                f"{wall / n * 1e3:.1f} ms/query wall, {cpu / n * 1e3:.1f} ms/query CPU, "
                f"busy {wall / seconds:.0%} of the run; process CPU {process_cpu / seconds:.0%} of a core "
                f"(search {cpu / seconds:.0%}, event loop and client {rest / seconds:.0%})")  # fmt: skip


def _query(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=4))


def _normal(url: str, seconds: float, latencies: list[float]) -> None:
    rng = random.Random(1)
    end = time.perf_counter() + seconds
    with SearchClient(url, timeout=120) as client:
        while time.perf_counter() < end:
            start = time.perf_counter()
            client.search([_query(rng)], k=5)
            latencies.append(time.perf_counter() - start)


def _flood(url: str, stop: Any, max_queries: int, counts: dict[str, Any]) -> None:
    counts["started"].value += 1
    rng = random.Random(2)
    with SearchClient(url, timeout=300) as client:
        while not stop.is_set():
            try:
                client.search([_query(rng) for _ in range(max_queries)], k=5)
                counts["large_served"].value += 1
            except SearchServiceError:
                counts["large_failed"].value += 1


def _oversized(url: str, stop: Any, max_queries: int, counts: dict[str, Any]) -> None:
    counts["started"].value += 1
    rng = random.Random(3)
    with SearchClient(url, timeout=60) as client:
        while not stop.is_set():
            try:
                client.search([_query(rng) for _ in range(max_queries * 20)], k=5)
            except SearchServiceError:
                counts["oversized_refused"].value += 1


def _abandon(url: str, stop: Any, max_queries: int, counts: dict[str, Any]) -> None:
    counts["started"].value += 1
    rng = random.Random(4)
    host, port = url.removeprefix("http://").split(":")
    while not stop.is_set():
        body = json.dumps({"queries": [_query(rng) for _ in range(max_queries)], "k": 5}).encode()
        with socket.create_connection((host, int(port)), timeout=10) as s:
            head = b"POST /search HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n" % (
                host.encode(),
                len(body),
            )
            s.sendall(head + body)
            time.sleep(0.01)  # leave before the answer
        counts["abandoned"].value += 1


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pages", type=int, default=10000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--max-queries", type=int, default=256)
    ap.add_argument("--retriever", choices=("bm25", "sleep"), default="bm25")
    ap.add_argument("--max-batch", type=int, default=32, help="the service's queries per search call")
    ap.add_argument(
        "--sleep-ms", type=float, default=0.0, help="the stand-in's cost per query (0: time BM25)"
    )
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    start = time.perf_counter()
    index: Retriever = _index(args.pages)
    print(f"BM25 over {args.pages} pages built in {time.perf_counter() - start:.1f} s")
    if args.retriever == "sleep":
        rng, start = random.Random(5), time.perf_counter()
        index.search([_query(rng) for _ in range(32)], k=5)
        index = _Sleepy(args.sleep_ms / 1e3 or (time.perf_counter() - start) / 32)
        print(f"sleeping stand-in: {index.per_query_s * 1e3:.1f} ms per query")
    options = ServiceOptions(max_queries=args.max_queries, max_batch=args.max_batch)
    ctx = multiprocessing.get_context("spawn")
    results = {}
    abusers: list[Callable[..., None]] = [_flood, _flood, _oversized, _abandon]
    for label, attackers in (("alone", []), ("under abuse", abusers)):
        names = ("started", "large_served", "large_failed", "oversized_refused", "abandoned")
        counts = {k: ctx.Value("i", 0) for k in names}
        latencies: list[float] = []
        timed = _Timed(index)
        with SearchService(timed, options).running() as url:
            stop = ctx.Event()
            # attackers in their own processes: their JSON building must not share this GIL
            procs = [ctx.Process(target=a, args=(url, stop, args.max_queries, counts), daemon=True)
                     for a in attackers]  # fmt: skip
            for p in procs:
                p.start()
            deadline = time.perf_counter() + 120
            while counts["started"].value < len(procs) and time.perf_counter() < deadline:
                time.sleep(0.05)  # spawned interpreters import evidra first: slow on a loaded machine
            time.sleep(1.0 if procs else 0.0)  # the flood is under way before we measure
            timed.calls.clear()
            start, cpu_start = time.perf_counter(), time.process_time()
            _normal(url, args.seconds, latencies)
            run_s, calls = time.perf_counter() - start, list(timed.calls)  # the measured window only
            process_cpu = time.process_time() - cpu_start
            stop.set()
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.terminate()
        p50, p99 = statistics.median(latencies), _percentile(latencies, 0.99)
        results[label] = (p50, p99)
        extra = ", ".join(f"{k} {v.value}" for k, v in counts.items() if attackers and k != "started")
        print(f"{label:12s} normal requests {len(latencies):5d}  p50 {p50 * 1e3:7.2f} ms  "
              f"p99 {p99 * 1e3:7.2f} ms  {extra}")  # fmt: skip
        print(f"{'':12s} {timed.summary(calls, run_s, process_cpu)}")
    abused, alone = results["under abuse"][1], results["alone"][1]
    print(f"RESULT p99_under_abuse_vs_alone={abused / alone:.1f}x p99_under_abuse_ms={abused * 1e3:.1f}")


if __name__ == "__main__":
    main()
