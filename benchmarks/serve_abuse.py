"""``serve-index`` under an abusive client: how a normal client fares beside one that floods it.

A BM25 index over synthetic pages is served in-process (``SearchService``). A normal client
sends one-query searches back to back for ``--seconds``, first alone (the baseline), then while
abusive clients send the largest allowed requests (``max_queries`` queries each), oversized
requests (refused with 413) and large requests they abandon mid-flight. Prints requests served,
p50/p99 latency of the normal client in both runs and their ratio, and where the search thread's
time went: CPU, waiting for a core (the kernel's run queue, from ``/proc``), and blocked, the
rest of its wall time: waiting for the GIL, for a search that neither sleeps nor reads files.

``--retriever sleep`` and ``--retriever spin`` swap BM25 for stand-ins that cost ``--cost-ms``
per query (default: what 32 BM25 queries took at startup): ``sleep`` sleeps, releasing the GIL;
``spin`` runs Python bytecode for that much CPU time, holding the GIL as a pure-Python BM25 does.
The difference between the two is what the interpreter lock costs the other requests.

    python benchmarks/serve_abuse.py --pages 10000 --seconds 10 [--retriever spin --cost-ms 8]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import random
import socket
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from evidra.retrieval.encoders.bm25 import BM25Retriever
from evidra.retrieval.interfaces import Exclude, Hit, Retriever
from evidra.retrieval.service.client import SearchClient, SearchServiceError
from evidra.retrieval.service.server import SearchService, ServiceOptions

WORDS = [f"w{i}" for i in range(5000)]


def _index(pages: int, seed: int = 0) -> BM25Retriever:
    rng = random.Random(seed)
    texts = {f"p{i:06d}": " ".join(rng.choices(WORDS, k=120)) for i in range(pages)}
    return BM25Retriever.build(texts)


class _Sleepy:
    """Costs ``per_query_s`` per query, sleeping: the GIL is free meanwhile."""

    def __init__(self, per_query_s: float) -> None:
        self.per_query_s = per_query_s

    def _work(self, seconds: float) -> None:
        time.sleep(seconds)

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        self._work(self.per_query_s * len(queries))
        return [[Hit(f"p{i:06d}", 1.0, "") for i in range(k)] for _ in queries]


class _Spin(_Sleepy):
    """Costs ``per_query_s`` of CPU per query in Python bytecode, holding the GIL (the interpreter
    hands it over when another thread asks, every ``sys.getswitchinterval()``, 5 ms by default)."""

    def _work(self, seconds: float) -> None:
        end = time.thread_time() + seconds
        while time.thread_time() < end:
            pass


def _queued_ns(tids: Sequence[int]) -> int:
    """Nanoseconds the threads ``tids`` of this process spent runnable but waiting for a core."""
    total = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:  # on-CPU ns, run-queue ns, slices
                total += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):  # not Linux, or the thread is gone
            pass
    return total


class _Timed:
    """Records each search call's queries, wall seconds and CPU seconds, and the search thread."""

    def __init__(self, inner: Retriever) -> None:
        self.inner = inner
        self.calls: list[tuple[int, float, float]] = []
        self.tid = 0

    def search(self, queries: Sequence[str], k: int = 10, exclude: Exclude = None) -> list[list[Hit]]:
        self.tid = threading.get_native_id()
        wall, cpu = time.perf_counter(), time.thread_time()
        hits = self.inner.search(queries, k=k, exclude=exclude)
        self.calls.append((len(queries), time.perf_counter() - wall, time.thread_time() - cpu))
        return hits


@dataclass
class _Window:
    """What this process did while the normal client measured: wall, CPU and run-queue seconds."""

    start: float = field(default_factory=time.perf_counter)
    cpu: float = field(default_factory=time.process_time)
    queued: int = field(default_factory=lambda: _queued_ns(_tids()))
    search_queued: int = 0

    def summary(self, timed: _Timed, calls: list[tuple[int, float, float]]) -> str:
        seconds, cpu = time.perf_counter() - self.start, time.process_time() - self.cpu
        queued = (_queued_ns(_tids()) - self.queued) / 1e9
        n = sum(c[0] for c in calls) or 1
        wall, search_cpu = sum(c[1] for c in calls), sum(c[2] for c in calls)
        search_queued = (_queued_ns([timed.tid]) - self.search_queued) / 1e9
        gil = max(0.0, wall - search_cpu - search_queued)
        return (
            f"search thread: {len(calls)} calls of {n / max(len(calls), 1):.1f} queries, per query "
            f"{wall / n * 1e3:.1f} ms wall = {search_cpu / n * 1e3:.1f} CPU + "
            f"{search_queued / n * 1e3:.1f} waiting for a core + {gil / n * 1e3:.1f} blocked; "
            f"process: CPU {cpu / seconds:.0%} of a core (search {search_cpu / seconds:.0%}), "
            f"waited for a core {queued / seconds:.0%}"
        )


def _tids() -> list[int]:
    try:
        return [int(t) for t in os.listdir("/proc/self/task")]
    except OSError:
        return []


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
    ap.add_argument("--retriever", choices=("bm25", "sleep", "spin"), default="bm25")
    ap.add_argument("--max-batch", type=int, default=32, help="the service's queries per search call")
    ap.add_argument("--cost-ms", type=float, default=0.0, help="a stand-in's cost per query (0: time BM25)")
    args = ap.parse_args()
    print(f"machine: {platform.processor() or platform.machine()}, python {platform.python_version()}")
    start = time.perf_counter()
    index: Retriever = _index(args.pages)
    print(f"BM25 over {args.pages} pages built in {time.perf_counter() - start:.1f} s")
    if args.retriever != "bm25":
        rng, start = random.Random(5), time.perf_counter()
        index.search([_query(rng) for _ in range(32)], k=5)
        stand_in = (_Sleepy if args.retriever == "sleep" else _Spin)(
            args.cost_ms / 1e3 or (time.perf_counter() - start) / 32
        )
        print(f"{args.retriever} stand-in: {stand_in.per_query_s * 1e3:.1f} ms per query")
        index = stand_in
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
            procs = [
                ctx.Process(target=a, args=(url, stop, args.max_queries, counts), daemon=True)
                for a in attackers
            ]
            for p in procs:
                p.start()
            deadline = time.perf_counter() + 120
            while counts["started"].value < len(procs) and time.perf_counter() < deadline:
                time.sleep(0.05)  # spawned interpreters import evidra first: slow on a loaded machine
            time.sleep(1.0 if procs else 0.0)  # the flood is under way before we measure
            timed.calls.clear()
            window = _Window(search_queued=_queued_ns([timed.tid]) if timed.tid else 0)
            _normal(url, args.seconds, latencies)
            calls = list(timed.calls)  # the measured window only
            report = window.summary(timed, calls)
            stop.set()
            for p in procs:
                p.join(timeout=60)
                if p.is_alive():
                    p.terminate()
        p50, p99 = statistics.median(latencies), _percentile(latencies, 0.99)
        results[label] = (p50, p99)
        extra = ", ".join(f"{k} {v.value}" for k, v in counts.items() if attackers and k != "started")
        print(
            f"{label:12s} normal requests {len(latencies):5d}  p50 {p50 * 1e3:7.2f} ms  "
            f"p99 {p99 * 1e3:7.2f} ms  {extra}"
        )
        print(f"{'':12s} {report}")
    abused, alone = results["under abuse"][1], results["alone"][1]
    print(f"RESULT p99_under_abuse_vs_alone={abused / alone:.1f}x p99_under_abuse_ms={abused * 1e3:.1f}")


if __name__ == "__main__":
    main()
